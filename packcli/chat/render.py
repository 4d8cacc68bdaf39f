"""Rendering records with a chat template in jinja2's sandbox, and finding the characters that carry loss.

A chat template is code from the internet, so it runs in jinja2's own sandbox, set up as transformers
sets it up (`packcli.chat.sandbox`), or in minijinja where that is shown to render the same
(`packcli.chat.engines`).

The template sees what transformers' ``apply_chat_template`` gives it: the record's messages as they
are (`packcli.ingest.messages`), ``tools``, ``documents``, ``add_generation_prompt=False``, the special
tokens, the record's ``chat_template_kwargs``, and ``strftime_now`` formatting one pinned date (the
``pack`` option ``--template-date``), so the same data renders the same text on every run.

The ``{% generation %}`` extension records where each generation block's text lands in the output.
Which blocks belong to which turn (``--loss last-assistant``, a turn of ``weight: 0``) is read off
the template itself: turn ``k`` begins where the text of the conversation cut before it, ``messages[:k]``,
parts from the full text. That holds for any prefix-preserving template (TRL's training templates are
made so); a template that renders earlier turns differently inside a generation block is refused for
that record rather than guessed at.

A rendered record must still hold what the record says, each message in its own turn
(`packcli.chat.guards`): a message's content the text lost (a template that reads a string given parts,
or parts given a string), a list of parts printed as text, a tool call or tool result the template
never printed in its turn, is a rejection, never an empty turn trained on; a field the user allows a
template to drop (``--allow-dropped-fields tool_calls``) is reported in ``Rendered.dropped`` instead.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time

import jinja2

from packcli.chat.guards import Dropped, check_kept
from packcli.chat.sandbox import RenderError, compile_template, generation_spans, run_marked, template_reads
from packcli.chat.templates import ChatTemplate, no_markers
from packcli.choices import LossPolicy
from packcli.errors import InputError
from packcli.ingest import Kind, Record
from packcli.ingest.messages import CONSUMED_KEYS, REASONING_FIELDS
from packcli.tokenizer.ends import TextEnds

# Templates that print the date (Llama 3.1, gpt-oss) must render the same text on every run.
DEFAULT_TEMPLATE_DATE = date(2024, 7, 26)

CHECK_FIRST = 16  # a minijinja renderer's first renders are all rendered by jinja2 too and compared
CHECK_PERIOD = 32  # then every render whose text's CRC-32 is 0 mod CHECK_PERIOD (deterministic per text)


@dataclass(frozen=True)
class Rendered:
    """Text to tokenize, the half-open character spans that carry loss, whether to add specials, and the
    fields the template dropped that the user allowed it to drop (`packcli.chat.guards`)."""

    text: str
    spans: tuple[tuple[int, int], ...]
    add_special_tokens: bool
    dropped: frozenset[str] = frozenset()


class Renderer:
    """Renders records to text plus supervised character spans under one template and loss policy."""

    def __init__(self, template: ChatTemplate, policy: LossPolicy, *, bos_token: str | None, eos_token: str | None,
                 template_date: date = DEFAULT_TEMPLATE_DATE, text_ends: TextEnds | None = None,
                 allow_dropped: frozenset[str] = frozenset(), engine: str = "jinja2") -> None:
        """``text_ends``: a text record's BOS and EOS (`packcli.tokenizer.ends.text_ends`; None: the text and
        ``eos_token``, the tokenizer's post-processor adding its own). ``engine``: ``jinja2``, or ``minijinja``
        for a template `choose_engine` resolved to it: a record minijinja cannot take, and every render
        after a cross-check found a difference, is rendered by jinja2 (`render_counts` says how many)."""
        try:
            self._template = compile_template(template.text)
        except jinja2.exceptions.TemplateSyntaxError as exc:
            raise InputError(f"template {template.source}: syntax error at line {exc.lineno}: {exc.message}") from exc
        self._reads = template_reads(template.text)
        self.template = template
        self.policy = LossPolicy(policy)
        self.allow_dropped = frozenset(allow_dropped)
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.text_ends = text_ends if text_ends is not None else TextEnds(suffix=eos_token or "")
        moment = datetime.combine(template_date, time())
        self._strftime_now = lambda fmt: moment.strftime(fmt)
        self._fixed = {"bos_token": bos_token or "", "eos_token": eos_token or "", "strftime_now": self._strftime_now}
        self._mini = None
        if engine == "minijinja":
            from packcli.chat.engines import compile_minijinja, minijinja_refusal, minijinja_version

            # Else jinja2 alone, whoever asked: a template the gate refuses, or a process (a Ray node) without
            # minijinja; the text is the same, and render_counts show which engine ran.
            if minijinja_refusal(template.text) is None and minijinja_version() is not None:
                self._mini = compile_minijinja(template.text, moment)
        self.render_counts = {"minijinja": 0, "jinja2": 0, "checked": 0, "mismatches": 0}
        self.mismatch: str | None = None  # the first cross-check difference, in words

    def render(self, record: Record) -> Rendered:
        """Render one record.

        Raises:
            RenderError: the template raised, lost a message's content, or the policy leaves nothing
                to supervise in this record.
            InputError: an assistant-only policy with a template that has no generation markers.
        """
        policy = effective_policy(self.policy, record.kind)
        if record.kind is Kind.chat:
            return self._render_chat(record, policy)
        eos = self.eos_token or ""
        if record.kind is Kind.prompt_completion:
            if policy not in (LossPolicy.completion, LossPolicy.all):
                raise RenderError(f"--loss {policy.value} does not apply to prompt/completion records; use completion or all")
            text = record.prompt + record.completion + eos
            start = 0 if policy is LossPolicy.all else len(record.prompt)
            return Rendered(text, ((start, len(text)),), add_special_tokens=True)
        if policy is not LossPolicy.all:
            raise RenderError(f"--loss {policy.value} does not apply to plain text records; use --loss all (or auto)")
        text = self.text_ends.wrap(record.text)
        return Rendered(text, ((0, len(text)),), add_special_tokens=self.text_ends.add_special_tokens)

    def ignored_fields(self, record: Record) -> set[str]:
        """The record's fields this template never names, so never reads (a warning, counted per field)."""
        present = {key for m in record.messages for key in m if key not in CONSUMED_KEYS} | set(record.template_kwargs)
        ignored = present - self._reads
        if ignored & set(REASONING_FIELDS):  # given under all its names: ignored only if none is read
            ignored -= set(REASONING_FIELDS)
            if not self._reads & set(REASONING_FIELDS):
                ignored.add(REASONING_FIELDS[0])
        return ignored

    def _render_chat(self, record: Record, policy: LossPolicy) -> Rendered:
        if policy is LossPolicy.completion:
            raise RenderError("--loss completion applies to prompt/completion records; use assistant or last-assistant for chat")
        supervised = policy in (LossPolicy.assistant, LossPolicy.last_assistant)
        if supervised and not self.template.has_generation_markers:
            raise no_markers(self.template)  # fatal: every chat record would come out unsupervised
        messages = record.messages
        assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if supervised and not assistants:
            raise RenderError("no assistant turn to supervise; use --loss all to train on the whole text")
        text, blocks = self._run(messages, record.template_kwargs)
        try:
            dropped = check_kept(messages, text, self.allow_dropped)
        except Dropped as exc:
            raise RenderError(str(exc)) from None
        if policy is LossPolicy.all:
            spans = [(0, len(text))]
        else:
            spans = [b for b in blocks if b[1] > b[0]]
            if not spans:
                raise RenderError("assistant turns rendered to no supervised text (empty generation blocks)")
        starts: dict[int, int] = {len(messages): len(text)}

        def turn_start(k: int) -> int:
            if k not in starts:
                starts[k] = self._turn_start(record, k, text, blocks)
            return starts[k]

        if policy is LossPolicy.last_assistant:
            first = turn_start(assistants[-1])
            spans = [s for s in spans if s[0] >= first]
            if not spans:
                raise RenderError("the final assistant turn rendered to no supervised text")
        for i in sorted(record.untrained):
            spans = _subtract(spans, turn_start(i), turn_start(i + 1))
        if not spans:
            raise RenderError("nothing left to supervise: the turns that would carry loss have weight 0")
        # The template renders special tokens (BOS included) itself: adding them again would double BOS.
        return Rendered(text, tuple(spans), add_special_tokens=False, dropped=dropped)

    def _run(self, messages: Sequence[dict], kwargs: dict) -> tuple[str, list[tuple[int, int]]]:
        """Render ``messages`` as transformers does; the text and its generation blocks' spans."""
        variables = {"messages": list(messages), "tools": None, "documents": None, "add_generation_prompt": False,
                     **self._fixed, **kwargs}
        if self._mini is not None and variables["strftime_now"] is self._strftime_now:
            marked = self._run_minijinja(variables)
            if marked is not None:
                return generation_spans(*marked)
        self.render_counts["jinja2"] += 1
        return self._run_jinja2(variables)

    def _run_minijinja(self, variables: dict) -> tuple[str, int] | None:
        """minijinja's marked text and block count, cross-checked on a sample; None: jinja2 renders it."""
        from packcli.chat.engines import BoundExceeded

        data = {name: value for name, value in variables.items() if name != "strftime_now"}  # a global there
        try:
            marked = self._mini.render(data)
        except BoundExceeded as exc:
            raise RenderError(f"template stopped: {exc} (--render-backend jinja2 has no such bound)") from None
        if marked is None:
            return None
        self.render_counts["minijinja"] += 1
        if self.render_counts["minijinja"] > CHECK_FIRST and zlib.crc32(
                marked[0].encode("utf-8", "surrogatepass")) % CHECK_PERIOD:
            return marked
        self.render_counts["checked"] += 1
        try:
            expected = self._run_jinja2_marked(variables)
        except RenderError as exc:
            self._disable_minijinja(f"jinja2 raised where minijinja rendered ({exc})")
            raise
        if expected != marked:
            at = _common_prefix(expected[0], marked[0])
            self._disable_minijinja(f"the texts differ at character {at}: jinja2 {expected[0][at:at + 40]!r}, "
                                    f"minijinja {marked[0][at:at + 40]!r}" if expected[0] != marked[0]
                                    else "the generation blocks differ")
        return expected

    def _disable_minijinja(self, why: str) -> None:
        """A cross-check found a difference: jinja2 renders the rest of this renderer's records."""
        self.render_counts["mismatches"] += 1
        self.mismatch = self.mismatch or why
        self._mini = None

    def _run_jinja2(self, variables: dict) -> tuple[str, list[tuple[int, int]]]:
        return generation_spans(*self._run_jinja2_marked(variables))

    def _run_jinja2_marked(self, variables: dict) -> tuple[str, int]:
        return run_marked(self._template, variables)

    def _turn_start(self, record: Record, k: int, text: str, blocks: list[tuple[int, int]]) -> int:
        """Where message ``k``'s part of ``text`` begins: where the render of ``messages[:k]`` parts from it."""
        if k == 0:
            return 0
        try:
            before, _ = self._run(record.messages[:k], record.template_kwargs)
        except RenderError as exc:
            raise RenderError(f"message {k}: cannot tell which generation blocks belong to it: rendering the "
                              f"messages before it alone failed ({exc})") from exc
        start = _common_prefix(before, text)
        if any(s < start < e for s, e in blocks):
            raise RenderError(f"message {k}: cannot tell which generation blocks belong to it: the template renders "
                              "the earlier turns differently once it follows (not prefix-preserving)")
        return start


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (binary search over C-speed comparisons)."""
    if b.startswith(a):
        return len(a)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _subtract(spans: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """``spans`` without the characters in ``[a, b)``."""
    out = []
    for s, e in spans:
        if s < min(e, a):
            out.append((s, min(e, a)))
        if max(s, b) < e:
            out.append((max(s, b), e))
    return out


def effective_policy(policy: LossPolicy, kind: Kind) -> LossPolicy:
    """Resolve ``auto`` per record kind."""
    if policy is not LossPolicy.auto:
        return policy
    return {Kind.chat: LossPolicy.assistant, Kind.prompt_completion: LossPolicy.completion, Kind.text: LossPolicy.all}[kind]
