"""What a rendered record must still hold: every message's content, tool calls and tool results, each
where that message was rendered.

A template that does not read a field drops it without an error, and the text it renders still looks
like a conversation: a tool-call turn rendered as an empty assistant turn, a list of content parts
printed as JSON, a tool result left out. Training on that teaches the model to answer a tool request
with nothing. Searching the whole text for what a message says is not enough: a function name is
also in the tools schema the template prints at the top, or in the user's question; a tool result is
often repeated by the final answer. So each message is judged where it was rendered:

    pieces   what a message says, in the form the record gives it: its content (a string, or each text
             part: parts are joined by the template, never printed as a list), each tool call's function
             name and arguments (whole as JSON or as the record's string, else every key and value), a
             tool result's content
    rounds   a user or system message and the assistant and tool messages after it, until the next one.
             Rounds are printed in order; inside one, templates reorder (Gemma 4 prints tool results in
             the model's turn, before its text)
    anchors  where each message's content is: an opener's after every earlier anchor, any other's at the
             first place in its round that overlaps no other anchor of the round

A message's content must be its anchor. Its tool calls, and a list of its parts printed as text, are
looked for between the anchors before and after it, else anywhere in its round outside the other
messages' anchors: a name the user asked for, or a result the answer repeats, is their words, not a
render of this message. A content found only inside a later message's content is a rejection that
names the message the template dropped. A piece is found stripped, as a JSON string's body, or line by
line in order (templates strip content and split ``<think>`` from the answer).

Cost: one pass over the text, no extra render (the turns are bounded by what the record says, not by
rendering its prefixes, so templates that render a turn differently once another follows, as gpt-oss
and Qwen3 drop earlier reasoning, are judged alike). A first pass settles nearly every record with a
search for each content in order and for each tool call whole between the contents around it; rounds
are built only when that fails (a drop, or a template that reorders a round).

What is missing is a rejection naming the message and the piece (`Dropped`, the reject reason), except
a field the user allows the template to drop (``--allow-dropped-fields tool_calls``): then the record is
packed and the field is reported back, so the run counts such records.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterator, Sequence

from packcli.choices import DroppableField
from packcli.ingest.messages import content_texts

TOOL_CALLS = DroppableField.tool_calls.value  # the message key, and the field a user may allow a template to drop


class Dropped(Exception):
    """A message's piece its template did not render in its turn; the message is the rejection reason."""


def tool_call_pieces(call: dict) -> Iterator[tuple[str, str]]:
    """(text, how a rejection names it) of one tool call: its function name, then its arguments, first whole as
    the record gives them (a JSON string, or an object as JSON: how nearly every template prints them), then,
    where that is not in the turn, every key and value of theirs (XML, ``key=value``, Python's repr)."""
    function = call.get("function", call)
    yield function["name"], ""
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        yield arguments, " arguments"
        arguments = json.loads(arguments)  # validated as a JSON object (packcli.ingest.messages)
    yield json.dumps(arguments, ensure_ascii=False), " arguments"
    yield from ((text, f" arguments{where}") for text, where in _leaves(arguments))


def printed_lists(content: object) -> list[str]:
    """How a template that reads content as a string prints a list of parts: Python's and JSON's spellings
    of its first part (a printed list starts with it), or ``[]``."""
    if not isinstance(content, list):
        return []
    if not content:
        return ["[]"]
    part = content[0]
    return [repr(part), json.dumps(part), json.dumps(part, ensure_ascii=False),
            json.dumps(part, separators=(",", ":"), ensure_ascii=False)]


def check_kept(messages: Sequence[dict], text: str, allowed: frozenset[str] = frozenset()) -> frozenset[str]:
    """Check that ``text`` (the render of ``messages``) shows every message's pieces in its own round.

    Args:
        allowed: fields the template may drop (`packcli.choices.DroppableField` values).

    Returns:
        The allowed fields the template dropped.

    Raises:
        Dropped: a piece missing from its round (not allowed), or a list of parts printed as text.
    """
    if _in_order(messages, text):
        return frozenset()  # every content found in order, and what else each says between its neighbours'
    anchors, rounds = _anchors(messages, text)  # every content in its round, or Dropped
    others = sorted(a for a in anchors if a is not None)  # anchors never overlap: sorted by start, by end too
    before, after = _neighbours(anchors, len(text))
    dropped: set[str] = set()
    for k, message in enumerate(messages):
        if not message.get(TOOL_CALLS) and not isinstance(message.get("content"), list):
            continue  # nothing but its content, which is its anchor
        where = f"message {k} ({message['role']})"
        turn = Turn(text, rounds[k], (before[k], after[k]), others, anchors[k])
        for form in printed_lists(message.get("content")):
            if turn.shows(form):
                raise Dropped(f"{where}: the template printed the list of content parts as text ({form[:40]}); it "
                              "expects content as a string")
        for j, call in enumerate(message.get(TOOL_CALLS) or ()):
            missing = _first_missing(tool_call_pieces(call), turn.shows)
            if missing is None:
                continue
            if TOOL_CALLS not in allowed:
                name = call.get("function", call)["name"]
                raise Dropped(f"{where}: tool_calls[{j}] ({name}){missing} lost in rendering (the template does not "
                              "print tool calls in the turn that makes them); pass --allow-dropped-fields tool_calls "
                              "to train on such records anyway")
            dropped.add(TOOL_CALLS)
    return frozenset(dropped)


class Turn:
    """Where one message's pieces may be: between the anchors around it (``near``: what comes before a
    round's first words, such as a printed list, is the opener's), else anywhere in its ``round`` that
    overlaps none of the other messages' anchors."""

    def __init__(self, text: str, round_: Span, near: Span, anchors: list[Span], own: Span | None) -> None:
        self.text, self.round, self.anchors, self.own = text, round_, anchors, own
        self.near = (near[0], min(round_[1], near[1]))

    def shows(self, piece: str) -> bool:
        (a, b), (lo, hi) = self.near, self.round
        if a < b and _find(piece, self.text, a, b) >= 0:
            return True
        return _find_outside(piece, self.text, lo, hi, self.anchors, self.own) >= 0


def _first_missing(pieces: Iterator[tuple[str, str]], shown: Callable[[str], bool]) -> str | None:
    """How the first piece of a call its turn does not show is named ("" for its name), or None: the name
    shown, and the arguments whole or else key by key and value by value."""
    name, _ = next(pieces)
    if not shown(name):
        return ""
    for text, what in pieces:
        if what == " arguments":  # a whole spelling: one shown is every argument shown
            if shown(text):
                return None
        elif not shown(text):
            return what
    return None


Span = tuple[int, int]


def _in_order(messages: Sequence[dict], text: str) -> bool:
    """Whether every message's content is found after the one before it, and every tool call whole (its name and
    its arguments as JSON or as the record's string) and no printed list between the contents around its
    message: nearly every record, settled without rounds (the verdict of rounds is the same when this holds)."""
    anchors, at = [], 0
    for message in messages:
        pieces = [t for t in content_texts(message.get("content")) if t.strip()]
        if not pieces:
            anchors.append(None)
            continue
        anchor = _in_sequence(pieces, text, at)
        if anchor is None:
            return False
        anchors.append(anchor)
        at = anchor[1]
    before, after = _neighbours(anchors, len(text))
    for k, message in enumerate(messages):
        calls, forms = message.get(TOOL_CALLS) or (), printed_lists(message.get("content"))
        if not calls and not forms:
            continue
        a, b = before[k], after[k]
        if a > b or any(form in text[a:b] for form in forms):
            return False
        for call in calls:
            pieces = tool_call_pieces(call)
            name, _ = next(pieces)
            if _find(name, text, a, b) < 0 or not any(what == " arguments" and _find(whole, text, a, b) >= 0
                                                     for whole, what in pieces):
                return False
    return True


def _neighbours(anchors: list[Span | None], length: int) -> tuple[list[int], list[int]]:
    """Per message, where the anchor before it ends and where the one after it starts (0 and ``length`` at the
    ends)."""
    before, after, end = [], [], 0
    for anchor in anchors:
        before.append(end)
        end = anchor[1] if anchor is not None else end
    start = length
    for anchor in reversed(anchors):
        after.append(start)
        start = anchor[0] if anchor is not None else start
    after.reverse()
    return before, after


def _anchors(messages: Sequence[dict], text: str) -> tuple[list[Span | None], list[Span]]:
    """Per message, where its content is in ``text`` (None for a message with no text to show), and its
    round's part of the text. A user or system message opens a round: its content is found after every
    earlier anchor; each later message's, until the next round, after the opener's, at the first place
    that overlaps no anchor of the round (templates reorder inside a round: Gemma 4 prints tool results
    inside the model's turn, before its text). A round's text runs from the end of the round before it to
    the start of the next round's opener.

    Raises:
        Dropped: a message's content is not found in its round.
    """
    anchors: list[Span | None] = []
    begins: list[int] = []  # per round: where its text begins
    opens: list[int | None] = []  # per round: where its opener's content starts
    round_of: list[int] = []  # per message: its round
    floor, last, placed = 0, 0, []  # where the round's messages are looked for; the last anchor's end; the round's
    for k, message in enumerate(messages):
        opener = k == 0 or message["role"] in ("user", "system")
        if opener:
            floor, placed = max(floor, last), []
            begins.append(floor)
            opens.append(None)
        round_of.append(len(begins) - 1)
        pieces = [t for t in content_texts(message.get("content")) if t.strip()]
        anchor = _place(pieces, text, floor, placed) if pieces else None
        if pieces and anchor is None:
            raise Dropped(_lost(messages, anchors, k, pieces, text, floor))
        anchors.append(anchor)
        if anchor is not None:
            bisect.insort(placed, anchor)
            last = max(last, anchor[1])
            if opener:
                floor, opens[-1] = anchor[1], anchor[0]
    # A round's text: from its opener's content (what comes before it, a tools schema after the system prompt,
    # is the round before's) to the next opener's content.
    starts = [o if o is not None else b for o, b in zip(opens, begins)]
    ends = starts[1:] + [len(text)]
    return anchors, [(starts[r], max(starts[r], ends[r])) for r in round_of]


def _place(pieces: list[str], text: str, floor: int, placed: list[Span]) -> Span | None:
    """The first place at or after ``floor`` where ``pieces`` appear in order without overlapping ``placed``
    (sorted)."""
    at = floor
    while (span := _in_sequence(pieces, text, at)) is not None:
        clash = _overlap(placed, *span)
        if clash is None:
            return span
        at = max(span[0] + 1, clash[1])
    return None


def _in_sequence(pieces: list[str], text: str, at: int) -> Span | None:
    """Where ``pieces`` (a message's content: a string, or its parts) appear one after another from ``at``."""
    start, end = -1, at
    for piece in pieces:
        found = _find(piece, text, end)
        if found < 0:
            return None
        start = found if start < 0 else start
        end = found + len(piece.strip())
    return start, end


def _overlap(spans: list[Span], start: int, end: int) -> Span | None:
    """A span of ``spans`` (sorted, not overlapping each other) that overlaps ``[start, end)``, or None."""
    k = bisect.bisect_left(spans, (end,)) - 1  # the last span starting before the end
    return spans[k] if k >= 0 and spans[k][1] > start else None


def _find_outside(piece: str, text: str, lo: int, hi: int, spans: list[Span], own: Span | None) -> int:
    """Where ``piece`` appears within ``text[lo:hi]`` without overlapping any of ``spans`` (sorted) but ``own``,
    or -1."""
    at = lo
    while (found := _find(piece, text, at, hi)) >= 0:
        clash = _overlap(spans, found, found + max(1, len(piece.strip())))
        if clash is None or clash == own:
            return found
        at = clash[1]
    return -1


def _lost(messages: Sequence[dict], anchors: list[Span | None], k: int, pieces: list[str], text: str,
          floor: int) -> str:
    """Why message ``k``'s content is not found in its round: an earlier message whose text was only found
    inside it (that one is what the template dropped), or it itself."""
    found = _find(pieces[0], text, floor)
    if found >= 0:
        end = found + len(pieces[-1].strip()) if len(pieces) == 1 else len(text)
        for j, anchor in enumerate(anchors):
            if anchor is not None and found <= anchor[0] and anchor[1] <= end:
                return _lost_message(j, messages[j], f"; its text is found only inside message {k}'s")
    return _lost_message(k, messages[k], "")


def _lost_message(k: int, message: dict, detail: str) -> str:
    where = f"message {k} ({message['role']})"
    if message["role"] == "tool":
        return f"{where}: the tool result is lost in rendering (the template does not print it in its turn{detail})"
    shape = "a list of text parts" if isinstance(message.get("content"), str) else "a string"
    return (f"{where}: content lost in rendering (the template printed none of it in its turn{detail}; it may "
            f"expect content as {shape})")


def _find(piece: str, text: str, start: int = 0, end: int | None = None) -> int:
    """Where ``piece`` appears in ``text[:end]`` at or after ``start``: stripped, as a JSON string's body, or line
    by line in order; -1 if it does not (an empty piece is everywhere)."""
    stripped = piece.strip()
    if not stripped:
        return start
    end = len(text) if end is None else end
    if (found := text.find(stripped, start, end)) >= 0:
        return found
    if (found := text.find(json.dumps(stripped, ensure_ascii=False)[1:-1], start, end)) >= 0:
        return found
    first, at = -1, start
    for line in stripped.splitlines():
        line = line.strip()
        if line:
            at = text.find(line, at, end)
            if at < 0:
                return -1
            first = at if first < 0 else first
            at += len(line)
    return first if first >= 0 else start


def _leaves(value: object, where: str = "") -> Iterator[tuple[str, str]]:
    """Every key and scalar value of a tool call's arguments as the text a template prints for it, with its path
    (a boolean or null is no piece: templates spell them ``true``, ``True`` or not at all)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key), f"{where}.{key} (the key)"
            yield from _leaves(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{where}[{i}]")
    elif isinstance(value, str):
        if value.strip():
            yield value, where
    elif not (isinstance(value, bool) or value is None):
        yield json.dumps(value), where
