"""A second template engine, minijinja, used only where it is shown to render what jinja2's sandbox renders.

jinja2's ``ImmutableSandboxedEnvironment`` is the reference: it decides what a template means. minijinja
(the Rust engine by jinja2's author) renders some templates several times faster and others slower once
the data is handed over safely (docs/render-backends.md), and it is used only under three conditions,
each of which otherwise leaves the record to jinja2:

- The template passes a static gate (`minijinja_refusal`): no name, attribute or keyword that starts
  with an underscore, no method that jinja2's sandbox refuses (the mutating methods of lists and
  dicts, ``str.format``), and no type test minijinja answers otherwise. Where jinja2 would raise a
  ``SecurityError``, minijinja would print nothing, so such a template is jinja2's alone.
- The record's data is plain JSON that both engines print alike (`data_literal`): dicts with string
  keys, lists, strings without lone surrogates, integers, booleans, floats that Python and Rust print
  with the same digits, and ``None`` only as a whole variable. The data reaches minijinja as a template
  literal, never as Python objects: minijinja holds its own copies, so a template cannot call a Python
  method on the record (minijinja lets a template call a Python object's public methods,
  ``messages.append`` included).
- minijinja renders without an error. Any error (``raise_exception``, a missing filter, a range limit)
  sends the record to jinja2, which then gives the reject reason in its own words.

Where minijinja does run, its run time is bounded by `FUEL` (minijinja's instruction budget) and its
output by `MAX_OUTPUT_CHARS`; a record past either is rejected, naming the bound. Which engine runs for a
template, and the cross-check that compares both while a run goes on, are `packcli.chat.render`'s.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

import jinja2
from jinja2 import nodes

from packcli.chat.marks import CLOSE, OPEN, hf_tojson
from packcli.chat.sandbox import RenderError, compile_template, environment, run_marked

FUEL = 20_000_000
"""minijinja's instruction budget per render: 600x what qwen3_5_think_training spends on a 422-message,
57,000-character conversation (32,000), and under half a second of an idle core when a loop burns it all."""

MAX_OUTPUT_CHARS = 1 << 26
"""A rendered record longer than this (64 Mi characters, ~16M tokens) is rejected under minijinja."""

_GENERATION = re.compile(r"\{%(-?)\s*(end)?generation\s*(-?)%\}")
_FILTER = "packcli_generation"  # the filter a generation block becomes; jinja2 has no filter of that name
_MAIN = "template"

# Methods jinja2's immutable sandbox refuses on the values a template is given (jinja2.sandbox's
# _mutable_spec for lists, dicts and sets), and str.format, which it wraps.
_REFUSED_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", "update", "popitem",
    "setdefault", "add", "discard", "difference_update", "intersection_update", "symmetric_difference_update",
    "format", "format_map", "mro",
})

# Type tests minijinja answers otherwise than jinja2, and for what: a template that asks one would render a
# record's string, or the None that ``.get`` of a missing key gives, differently record by record, which no
# probe can rule out. (The data has no None inside: `data_literal`; an undefined value is iterable in both.)
_TYPE_TESTS = {"sequence": "strings and dicts (jinja2: true, minijinja: false)",
               "iterable": "the None of .get() (jinja2: false, minijinja: true)"}

# Python prints a float outside [1e-4, 1e16) with an exponent, Rust never does; inside, both print the
# shortest digits that read back as the same float, and json writes what repr() writes.
_EXPONENT = re.compile(r"[0-9]e[-+][0-9]")  # json writes the sign


def minijinja_version() -> str | None:
    """The installed minijinja's version (None: not installed; it is the ``render`` extra)."""
    from importlib import metadata

    try:
        return metadata.version("minijinja")
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=16)
def minijinja_refusal(text: str) -> str | None:
    """Why minijinja may not render this template (None: it may, subject to the cross-check)."""
    tree = environment().parse(text)
    for node in tree.find_all((nodes.Name, nodes.Getattr, nodes.Keyword, nodes.NSRef)):
        name = {nodes.Name: "name", nodes.Getattr: "attr", nodes.Keyword: "key", nodes.NSRef: "attr"}[type(node)]
        value = getattr(node, name)
        if value.startswith("_"):
            return f"the template names {value!r}, which jinja2's sandbox refuses and minijinja would print as empty"
        if isinstance(node, nodes.Getattr) and value in _REFUSED_METHODS:
            return f"the template calls .{value}, which jinja2's sandbox refuses"
    calls_get = any(isinstance(node.node, nodes.Getattr) and node.node.attr == "get" for node in tree.find_all(nodes.Call))
    for node in tree.find_all(nodes.Test):
        if node.name == "sequence" or (node.name == "iterable" and calls_get):
            return f"the template tests 'is {node.name}', which minijinja answers otherwise for {_TYPE_TESTS[node.name]}"
    if any(isinstance(node, nodes.Name) and node.name == "null" for node in tree.find_all(nodes.Name)):
        return "the template names 'null', which packcli defines for the data it gives minijinja"
    if _FILTER in text:
        return f"the template names {_FILTER!r}, packcli's own name for generation blocks under minijinja"
    return None


def data_literal(variables: dict[str, object]) -> str | None:
    """``{% set name = literal %}`` for every variable, or None where a value is not plain JSON data that
    both engines print alike (module docstring).

    JSON is a minijinja literal but for ``null``, which the prelude defines as ``none`` (`minijinja_refusal`
    keeps templates that name ``null`` on jinja2). What JSON would change is caught by reading it back:
    a tuple, a non-string key, a value json cannot write. An exponent float is refused wherever the text
    has one (a string that looks like one only costs that record jinja2's speed).
    """
    parts = ["{% set null = none %}"]
    for name, value in variables.items():
        if not name.isidentifier():
            return None
        try:  # ASCII: json's fast path; minijinja reads the \u escapes (a lone surrogate's is its syntax error)
            dumped = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            return None
        if ("e-" in dumped or "e+" in dumped) and _EXPONENT.search(dumped):
            return None
        # minijinja loops over None as over nothing and lists it as []; jinja2 raises. A None inside a value
        # (an assistant turn's "content": null) sends the record to jinja2 (a string holding ": null" too);
        # a variable that is None as a whole (``tools``) is alike for every record: the probe covers it.
        if ": null" in dumped or "[null" in dumped or ", null" in dumped:
            return None
        if json.loads(dumped) != value:
            return None
        parts.append(f"{{% set {name} = {dumped} %}}")
    return "".join(parts)


class MiniJinjaTemplate:
    """One template compiled by minijinja, set up as `packcli.chat.render` sets jinja2 up.

    ``{% generation %}`` blocks become a filter block whose filter prints ``OPEN`` + body + ``CLOSE``
    (the marks `packcli.chat.sandbox.generation_spans` reads) and counts the blocks run; a filter block
    is still a block tag, so ``trim_blocks``/``lstrip_blocks`` and ``-`` treat it as jinja2 treats
    ``{% generation %}``.
    """

    def __init__(self, text: str, moment: datetime) -> None:
        import minijinja

        self._opened = 0
        self.env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True, pycompat=True, fuel=FUEL)
        self.env.add_filter("tojson", hf_tojson)
        self.env.add_filter(_FILTER, self._generation)
        self.env.add_global("raise_exception", _raise_exception)
        self.env.add_global("strftime_now", lambda fmt: moment.strftime(fmt))
        self.env.add_template(_MAIN, _GENERATION.sub(self._tag, text))

    @staticmethod
    def _tag(match: re.Match) -> str:
        left, end, right = match.groups()
        return "{%" + left + (" endfilter " if end else f" filter {_FILTER} ") + right + "%}"

    def _generation(self, body: str) -> str:
        self._opened += 1
        return OPEN + body + CLOSE

    def render(self, variables: dict[str, object]) -> tuple[str, int] | None:
        """The marked text and the generation blocks run, or None: the data is not plain (`data_literal`)
        or minijinja raised; jinja2 renders the record then.

        Raises:
            BoundExceeded: the render used up `FUEL` or printed more than `MAX_OUTPUT_CHARS`.
        """
        import minijinja

        literal = data_literal(variables)
        if literal is None:
            return None
        self._opened = 0
        try:
            marked = self.env.render_str(literal + '{% include "' + _MAIN + '" %}')
        except minijinja.TemplateError as exc:
            if "engine ran out of fuel" in str(exc):  # str: the include wraps the cause
                raise BoundExceeded(f"the template ran past minijinja's bound of {FUEL:,} instructions") from None
            return None
        except Exception:  # noqa: BLE001 - raise_exception or the template's own error: jinja2 words it
            return None
        if len(marked) > MAX_OUTPUT_CHARS:
            raise BoundExceeded(f"the rendered text is longer than {MAX_OUTPUT_CHARS:,} characters")
        return marked, self._opened


class BoundExceeded(Exception):
    """minijinja's run time or output bound was reached; the record's reject reason."""


def _raise_exception(message: str) -> None:
    raise RuntimeError(message)  # minijinja wraps it; jinja2 renders the record again and words the reject


@lru_cache(maxsize=16)
def compile_minijinja(text: str, moment: datetime) -> MiniJinjaTemplate | None:
    """The template under minijinja, once per (text, date); None where minijinja cannot compile what jinja2
    compiled (a syntax minijinja lacks): jinja2 renders it."""
    import minijinja

    try:
        return MiniJinjaTemplate(text, moment)
    except minijinja.TemplateError:
        return None



def _probe_conversations() -> list[dict[str, object]]:
    """What the start-up probe renders with both engines: the shapes chat data has (a system turn, many
    turns, tool schemas, tool calls with arguments as objects and as strings, tool results, reasoning,
    an assistant turn with no content, quotes, backslashes, newlines and non-Latin text), each whole and
    cut before its last turn."""
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                        "unit": {"type": "string", "enum": ["C", "F"]}},
                       "required": ["city"]}}}]
    call = {"id": "call_0", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": {"city": "Zürich", "unit": "C"}}}
    text_call = {**call, "function": {**call["function"], "arguments": '{"city": "東京"}'}}
    chats: list[tuple[list[dict], list | None]] = [
        ([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi! How can I help?"}], None),
        ([{"role": "system", "content": "You are terse."}]
         + [m for i in range(6) for m in ({"role": "user", "content": f"Question {i}: what is {i} + {i}?\nExplain."},
                                          {"role": "assistant", "content": f"It is {2 * i}.\n\nBecause {i} + {i}."})],
         None),
        ([{"role": "user", "content": "Weather in Zürich?"},
          {"role": "assistant", "content": "", "tool_calls": [call]},
          {"role": "tool", "tool_call_id": "call_0", "content": '{"temp": 21.5, "sky": "clear"}'},
          {"role": "assistant", "content": "It is 21.5 °C and clear."}], tools),
        ([{"role": "system", "content": "Use tools."}, {"role": "user", "content": "And Tokyo?"},
          {"role": "assistant", "content": None, "tool_calls": [text_call]},
          {"role": "tool", "tool_call_id": "call_0", "content": "18"},
          {"role": "assistant", "content": "18 degrees."}], tools),
        ([{"role": "user", "content": "Think first: 12 * 12?"},
          {"role": "assistant", "content": "144", "reasoning_content": "12 * 12 = 144."},
          {"role": "user", "content": "Sure?"},
          {"role": "assistant", "content": "Yes, 144.", "reasoning_content": "Checked: 144."}], None),
        ([{"role": "user", "content": 'Quote "this" and \\ that {{ not a tag }} {% raw %} </s> <|im_end|>'},
          {"role": "assistant", "content": "Київ, مراكش, São Paulo 😀\ttab\r\nline"}], None),
    ]
    probes = []
    for messages, tool_list in chats:
        for cut in (len(messages), len(messages) - 1):
            probes.append({"messages": messages[:cut], "tools": tool_list, "documents": None,
                           "add_generation_prompt": False})
    return probes


@dataclass(frozen=True)
class EngineChoice:
    """The engine that renders a template in this run, and why (the manifest's ``rendering``)."""

    engine: str
    reason: str
    version: str | None = None


def choose_engine(text: str, asked: str, *, moment: datetime, bos_token: str | None,
                  eos_token: str | None) -> EngineChoice:
    """``jinja2``, or ``minijinja`` where it may render the template (`minijinja_refusal`), renders every probe
    conversation as jinja2 does (text, generation blocks, and raising where jinja2 raises) and, under
    ``auto``, takes under 0.9x jinja2's time on them.

    Raises:
        InputError: ``minijinja`` asked for and not installed.
    """
    from packcli.errors import InputError

    if asked == "jinja2":
        return EngineChoice("jinja2", "asked for")
    version = minijinja_version()
    if version is None:
        if asked == "minijinja":
            raise InputError("`render_backend='minijinja'`: minijinja is not installed",
                             "pip install 'packcli[render]'")
        return EngineChoice("jinja2", "minijinja is not installed (pip install 'packcli[render]')")
    refusal = minijinja_refusal(text)
    if refusal is not None:
        return EngineChoice("jinja2", f"minijinja may not render this template: {refusal}")
    try:
        reference = compile_template(text)
    except jinja2.exceptions.TemplateSyntaxError:  # the renderer says where, as an input error
        return EngineChoice("jinja2", "the template does not compile", version)
    strftime_now = moment.strftime
    fast = compile_minijinja(text, moment)
    if fast is None:
        return EngineChoice("jinja2", "minijinja cannot compile this template", version)
    fixed = {"bos_token": bos_token or "", "eos_token": eos_token or ""}
    probes = [{**probe, **fixed} for probe in _probe_conversations()]
    expected = []
    for probe in probes:
        try:
            expected.append(run_marked(reference, {**probe, "strftime_now": strftime_now}))
        except RenderError:
            expected.append(None)
    taken: list[dict] = []  # the probes both engines rendered: the ones timed
    for i, (probe, want) in enumerate(zip(probes, expected)):
        try:
            got = fast.render(probe)
        except BoundExceeded as exc:
            return EngineChoice("jinja2", f"minijinja hit its bound on probe conversation {i}: {exc}", version)
        if got is not None and got != want:
            what = "jinja2 raised where minijinja rendered" if want is None else "the texts differ"
            return EngineChoice("jinja2", f"minijinja rendered probe conversation {i} otherwise than jinja2 ({what})",
                                version)
        if got is not None:
            taken.append(probe)
    if not taken:
        return EngineChoice("jinja2", "minijinja declined every probe conversation", version)
    if asked == "minijinja":
        return EngineChoice("minijinja", f"asked for; rendered {len(taken)} probe conversations as jinja2 does", version)
    jinja_s, mini_s = _seconds(lambda: [run_marked(reference, {**p, "strftime_now": strftime_now}) for p in taken]), _seconds(
        lambda: [fast.render(p) for p in taken])
    if mini_s < 0.9 * jinja_s:
        return EngineChoice("minijinja", f"rendered {len(taken)} probe conversations as jinja2 does, in "
                                         f"{mini_s / jinja_s:.2f}x its time", version)
    return EngineChoice("jinja2", f"minijinja renders this template as jinja2 does but not faster "
                                  f"({mini_s / jinja_s:.2f}x jinja2's time on the probe)", version)


def _seconds(work: Callable[[], object], repeats: int = 3) -> float:
    """The best of ``repeats`` timings (CPU seconds: a busy machine inflates wall time, not this)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best
