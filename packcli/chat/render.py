"""Rendering records with a chat template in jinja2's sandbox, and finding the characters that carry loss.

A chat template is code from the internet, so it runs in Jinja2's immutable sandbox. The
``{% generation %}`` extension records where each generation block's text lands in the output:
those character spans are what the tokenizer turns into supervised labels.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from types import MethodType

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from packcli.chat.templates import ChatTemplate, _no_markers
from packcli.choices import LossPolicy
from packcli.errors import InputError
from packcli.ingest import Kind, Message, Record

# Templates that print the date (Llama 3) must render the same text on every run.
FIXED_DATE = "26 Jul 2024"


@dataclass(frozen=True)
class Rendered:
    """Text to tokenize, the half-open character spans that carry loss, and whether to add specials."""

    text: str
    spans: tuple[tuple[int, int], ...]
    add_special_tokens: bool


class RenderError(Exception):
    """A record that renders to nothing trainable; its message is the rejection reason."""


class _GenerationTracker(Extension):
    """``{% generation %}`` blocks: record where in the output each block's text lands.

    ``Template.generate`` yields output chunks in order, so when a block is evaluated the chunks
    yielded so far are everything that precedes it.
    """

    tags = {"generation"}

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        self.chunks: list[str] | None = None
        self.spans: list[tuple[int, int]] = []
        self._counted = self._length = 0  # chunks already summed, and their total length

    def parse(self, parser):  # noqa: ANN001, ANN201 - jinja2's extension protocol
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_track", []), [], [], body).set_lineno(lineno)

    def reset(self, chunks: list[str] | None) -> None:
        self.chunks, self.spans, self._counted, self._length = chunks, [], 0, 0

    def _track(self, caller) -> str:  # noqa: ANN001
        # A block's body is a macro of no arguments: ``caller()`` is then ``caller._func()`` plus argument
        # parsing (a quarter of the block's cost), unless the body uses caller/varargs/kwargs or escaping.
        plain = (_Sandbox.MEMO_SAFE and not (caller.arguments or caller.catch_kwargs or caller.catch_varargs
                                             or caller.caller or caller._default_autoescape
                                             or self.environment.is_async))
        text = caller._func() if plain else caller()
        if self.chunks is not None:
            # the output so far: add only the chunks yielded since the last block (a long chat has many)
            self._length += sum(len(chunk) for chunk in self.chunks[self._counted:])
            self._counted = len(self.chunks)
            self.spans.append((self._length, self._length + len(text)))
        return text


class _Sandbox(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox, with its attribute verdicts remembered for the built-in types.

    Re-deciding whether ``str.strip`` or ``dict.get`` is safe on every access was a third of the
    time spent rendering a chat template. In jinja2 3.1 the verdict depends only on the object's
    type and the attribute's name; the memo is limited to built-in types and Jinja's own loop and
    namespace objects, none of which can make ``isinstance`` see another class. Everything else is
    decided afresh, as before.

    ``message.content`` on a plain dict is the other hot spot: Jinja tries the attribute first and
    reads the key after catching AttributeError, a raised exception per access. A plain dict has no
    attributes beyond its type's, so for a name outside ``dir(dict)`` the key is read directly,
    which is the same result without the exception. On the plain built-in types only ``format`` and
    ``format_map`` can yield ``str.format`` (which the sandbox must wrap), so other names skip that test;
    ``loop.index`` and the loop's other numbers are read directly, a `namespace()`'s attributes too;
    and a call of a plain type's built-in method (vetted when it was looked up), or of the
    ``{% generation %}`` tracker, skips the checks meant for template callables.
    """

    _PLAIN_TYPES = frozenset({str, dict, list, tuple, int, float, bool, type(None)})
    _DICT_ATTRIBUTES = frozenset(dir(dict))
    _LOOP_NUMBERS = frozenset({"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0"})
    _BUILTIN_METHOD = type("".strip)

    _MEMO_TYPES = frozenset({str, dict, list, tuple, int, float, bool, type(None), jinja2.runtime.LoopContext,
                             jinja2.utils.Namespace})
    MEMO_SAFE = metadata.version("jinja2").startswith("3.1.")  # the rule above is read from 3.1's sandbox

    def __init__(self, **options) -> None:  # noqa: ANN003
        super().__init__(**options)
        self._verdicts: dict[tuple[type, str], bool] = {}

    def getattr(self, obj: object, attribute: str) -> object:
        kind = type(obj)
        if not self.MEMO_SAFE:
            return super().getattr(obj, attribute)
        if kind is dict and attribute not in self._DICT_ATTRIBUTES:
            try:
                return obj[attribute]  # type: ignore[index]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        if kind is jinja2.runtime.LoopContext and attribute in self._LOOP_NUMBERS:
            return getattr(obj, attribute)  # a number or a bool, computed by Jinja
        if kind is jinja2.utils.Namespace and attribute[:1] != "_":
            try:
                return getattr(obj, attribute)  # what the template set: no other attributes are reachable
            except AttributeError:
                return self.undefined(obj=obj, name=attribute)
        if kind not in self._PLAIN_TYPES or attribute in ("format", "format_map"):
            return super().getattr(obj, attribute)  # str.format must be wrapped by the sandbox
        try:
            value = getattr(obj, attribute)
        except AttributeError:
            return super().getattr(obj, attribute)
        return value if self.is_safe_attribute(obj, attribute, value) else self.unsafe_undefined(obj, attribute)

    def call(__self, __context: jinja2.runtime.Context, __obj: object, *args: object, **kwargs: object) -> object:  # noqa: N805
        # A built-in method of a plain type (``content.strip()``), already vetted when it was looked up:
        # what Context.call does for it, without the checks that cannot apply (names as Jinja's: any
        # keyword may come from the template).
        if type(__obj) is MethodType and __obj.__func__ is _GenerationTracker._track and __self.MEMO_SAFE:
            return __obj(kwargs["caller"])  # {% generation %}: our own method, always given only ``caller``
        if __self.MEMO_SAFE and type(__obj) is __self._BUILTIN_METHOD and type(__obj.__self__) in __self._PLAIN_TYPES:
            kwargs.pop("_block_vars", None)
            kwargs.pop("_loop_vars", None)
            try:
                return __obj(*args, **kwargs)
            except StopIteration:
                return __context.environment.undefined("value was undefined because a callable raised a "
                                                       "StopIteration exception")
        return super().call(__context, __obj, *args, **kwargs)

    def is_safe_attribute(self, obj: object, attr: str, value: object) -> bool:
        kind = type(obj)
        if not self.MEMO_SAFE or kind not in self._MEMO_TYPES:
            return super().is_safe_attribute(obj, attr, value)
        verdict = self._verdicts.get((kind, attr))
        if verdict is None:
            verdict = self._verdicts[kind, attr] = super().is_safe_attribute(obj, attr, value)
        return verdict


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):  # noqa: ANN001, ANN202
    # HF's tojson: unlike Jinja's built-in it does not HTML-escape, which templates rely on.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class Renderer:
    """Renders records to text plus supervised character spans under one template and loss policy."""

    def __init__(self, template: ChatTemplate, policy: LossPolicy, *, bos_token: str | None, eos_token: str | None) -> None:
        env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTracker, "jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = lambda fmt: FIXED_DATE if fmt == "%d %b %Y" else "2024-07-26"
        try:
            self._template = env.from_string(template.text)
        except jinja2.exceptions.TemplateSyntaxError as exc:
            raise InputError(f"template {template.source}: syntax error at line {exc.lineno}: {exc.message}") from exc
        self._tracker: _GenerationTracker = env.extensions[_GenerationTracker.identifier]  # type: ignore[assignment]
        # The template's globals (a ChainMap of Jinja's and ours), flattened once: `generate` copies
        # them into every render's context key by key, a fifth of the time of a short chat.
        self._globals = dict(self._template.globals)
        self.template = template
        self.policy = LossPolicy(policy)
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, record: Record) -> Rendered:
        """Render one record.

        Raises:
            RenderError: the policy does not apply to this record, or it has nothing to supervise.
        """
        policy = effective_policy(self.policy, record.kind)
        if record.kind is Kind.chat:
            return self._render_chat(record.messages, policy)
        eos = self.eos_token or ""
        if record.kind is Kind.prompt_completion:
            if policy not in (LossPolicy.completion, LossPolicy.all):
                raise RenderError(f"--loss {policy.value} does not apply to prompt/completion records; use completion or all")
            text = record.prompt + record.completion + eos
            start = 0 if policy is LossPolicy.all else len(record.prompt)
            return Rendered(text, ((start, len(text)),), add_special_tokens=True)
        if policy is not LossPolicy.all:
            raise RenderError(f"--loss {policy.value} does not apply to plain text records; use --loss all (or auto)")
        text = record.text + eos
        return Rendered(text, ((0, len(text)),), add_special_tokens=True)

    def _render_chat(self, messages: Sequence[Message], policy: LossPolicy) -> Rendered:
        if policy is LossPolicy.completion:
            raise RenderError("--loss completion applies to prompt/completion records; use assistant or last-assistant for chat")
        supervised = policy in (LossPolicy.assistant, LossPolicy.last_assistant)
        if supervised and not self.template.has_generation_markers:
            raise _no_markers(self.template)  # fatal: every chat record would come out unsupervised
        if supervised and not any(m.role == "assistant" for m in messages):
            raise RenderError("no assistant turn to supervise; use --loss all to train on the whole text")
        chunks: list[str] = []
        self._tracker.reset(chunks)
        # What Template.generate does, with the globals already in the context's variables (``shared``).
        context = self._template.new_context({
            **self._globals, "messages": [{"role": m.role, "content": m.content} for m in messages],
            "bos_token": self.bos_token or "", "eos_token": self.eos_token or "",
            "add_generation_prompt": False, "tools": None, "date_string": FIXED_DATE,
        }, shared=True)
        try:
            try:
                for chunk in self._template.root_render_func(context):
                    chunks.append(chunk)
            except Exception:  # noqa: BLE001 - re-raised with the template's own traceback, as generate() does
                self._template.environment.handle_exception()
        except jinja2.exceptions.SecurityError as exc:
            raise InputError(f"template {self.template.source}: unsafe operation blocked by the sandbox: {exc}") from exc
        except jinja2.exceptions.TemplateError as exc:
            raise RenderError(f"template raised: {exc}") from exc
        finally:
            spans = self._tracker.spans
            self._tracker.reset(None)
        text = "".join(chunks)
        if policy is LossPolicy.all:
            return Rendered(text, ((0, len(text)),), add_special_tokens=False)
        spans = [s for s in spans if s[1] > s[0]]
        if not spans:
            raise RenderError("assistant turns rendered to no supervised text (empty generation blocks)")
        if policy is LossPolicy.last_assistant:
            spans = spans[-1:]
        # The template renders special tokens (BOS included) itself: adding them again would double BOS.
        return Rendered(text, tuple(spans), add_special_tokens=False)


def effective_policy(policy: LossPolicy, kind: Kind) -> LossPolicy:
    """Resolve ``auto`` per record kind."""
    if policy is not LossPolicy.auto:
        return policy
    return {Kind.chat: LossPolicy.assistant, Kind.prompt_completion: LossPolicy.completion, Kind.text: LossPolicy.all}[kind]
