"""jinja2's sandbox as packcli sets it up for chat templates, and the marks of ``{% generation %}`` blocks.

A chat template is code from the internet, so it runs in jinja2's own ``ImmutableSandboxedEnvironment``,
set up as transformers sets it up (``tojson`` without HTML escaping, ``raise_exception``, and its
``dict``/``namespace`` globals), and is compiled once per template text (`compile_template`). Nothing
of the sandbox's safety is overridden: `_Sandbox` only reaches jinja2's own decisions sooner, which is
what makes rendering a long chat affordable. `run_marked` renders one conversation with the blocks'
marks in it; `generation_spans` turns the marks into character spans. `packcli.chat.render` (records,
loss policies) and `packcli.chat.engines` (minijinja, checked against this) both build on it.
"""

from __future__ import annotations

import re
from functools import lru_cache

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from packcli.chat.marks import CLOSE, OPEN, hf_tojson

_MARKS = re.compile(f"([{OPEN}{CLOSE}])")  # captured: split keeps each mark


class RenderError(Exception):
    """A record that renders to nothing trainable; its message is the rejection reason."""


class _GenerationTracker(Extension):
    """``{% generation %}`` blocks: the text they print, marked where it lands in the output.

    Each block prints ``OPEN`` before its body and ``CLOSE`` after it, read as plain attributes of this
    extension, so a block costs two output chunks instead of a macro call; `generation_spans` turns
    the marks back into character spans. A mark lands where the block's text lands even when a macro
    or a ``{% set %}`` block prints the block later. The ``opening`` attribute counts the blocks run,
    so a record whose own text holds a mark, or a template that cut one off, is caught instead of
    moving a span.
    """

    tags = {"generation"}

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        self.opened: int | None = None  # blocks opened in the render that is running; None: none running

    def parse(self, parser):  # noqa: ANN001, ANN201 - jinja2's extension protocol
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return [nodes.Output([self.attr("opening")]).set_lineno(lineno), *body,
                nodes.Output([self.attr("closing")]).set_lineno(lineno)]

    @property
    def opening(self) -> str:
        if self.opened is not None:
            self.opened += 1
        return OPEN

    closing = CLOSE

    def start(self) -> None:
        if self.opened is not None:
            raise RuntimeError("a template's generation tracker is already running a render")
        self.opened = 0

    def stop(self) -> int:
        opened, self.opened = self.opened, None
        return opened or 0


def generation_spans(marked: str, opened: int) -> tuple[str, list[tuple[int, int]]]:
    """The text without its marks, and each generation block's span in it (inner blocks before outer ones).

    Raises:
        RenderError: the marks do not pair up with the ``opened`` blocks the template ran.
    """
    if not opened:
        return marked, []
    parts = _MARKS.split(marked)  # text, mark, text, ..., mark, text: one pass over the text
    if len(parts) != 4 * opened + 1:
        raise RenderError("the rendered text holds a Unicode noncharacter U+FDD0 or U+FDD1 (packcli marks generation "
                          "blocks with them), or the template cut a generation block's mark off; remove them from the "
                          "record")
    spans, stack, at = [], [], 0
    for k in range(1, len(parts), 2):
        at += len(parts[k - 1])  # where the mark is in the text without marks
        if parts[k] == OPEN:
            stack.append(at)
        elif stack:
            spans.append((stack.pop(), at))
        else:
            raise RenderError("the template printed a generation block's end before its start")
    if stack:
        raise RenderError("the template printed a generation block's start without its end")
    return "".join(parts[0::2]), spans


class _TemplateDict:
    """transformers' ``dict`` global: builds a plain dict, with nothing else reachable through it."""

    def __call__(self, *args: object, **kwargs: object) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: object, **kwargs: object) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """transformers' ``namespace`` global: a template may not store an underscore-prefixed attribute."""

    def __init__(*args: object, **kwargs: object) -> None:  # noqa: N805 - Namespace's own signature trick
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: object) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_': {name!r}")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


# Every attribute a plain dict has: its class's and object's (a dict instance has no attributes of its own).
_DICT_ATTRIBUTES = frozenset(dir(dict))
# Values that cannot be a bound ``str.format``, the one safe attribute value jinja2 hands out wrapped.
_PLAIN_VALUES = frozenset({int, bool, float, str, type(None), dict, list})
_BUILTIN_METHOD = type("".strip)
_STR_FORMAT = ("format", "format_map")  # jinja2 sandboxes these: they reach a template wrapped, never bare


class _Sandbox(ImmutableSandboxedEnvironment):
    """jinja2's ``ImmutableSandboxedEnvironment``, making its own decisions faster, never different.

    A long chat makes a template read hundreds of ``message.role`` and ``message.content``, and each
    read is a sandbox decision. Two shortcuts give jinja2's answer without the work behind it
    (docs/chat-data.md, templates):

    - ``getattr`` on a plain ``dict`` for a name no dict attribute has: jinja2 would try the attribute,
      fail, and then read the item, so the item is read at once (``message.items`` still goes to jinja2).
    - ``is_safe_attribute`` is asked once per (type, attribute name) and remembered: jinja2 bases the
      answer on those alone (a leading underscore, the internals of functions, methods, types, frames,
      code and generators, the mutating methods of lists, dicts, sets and deques), never on the value.
      An attribute remembered as safe is then read as jinja2 reads it (the value, a ``str.format``
      method wrapped by jinja2's own `wrap_str_format`), without the calls around it: ``loop.index0``,
      ``ns.flag`` and ``text.strip`` are most of a long chat's reads.
    - ``call`` of a ``str`` method (``text.strip()``) calls it: jinja2 would find it safe to call (a
      builtin method carries no ``unsafe_callable`` or ``alters_data``) and pass it no context, and
      ``format``/``format_map`` are left to jinja2 (`getattr` hands them out wrapped; older jinja2
      releases wrapped them at the call).
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._attribute_decisions: dict[tuple[type, str], bool] = {}

    def getattr(self, obj: object, attribute: str) -> object:
        kind = type(obj)
        if kind is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        if not self._attribute_decisions.get((kind, attribute)):  # unseen or unsafe: jinja2's own path
            return super().getattr(obj, attribute)
        try:  # jinja2's getattr with its safety decision already known to be yes
            value = getattr(obj, attribute)
        except AttributeError:
            try:
                return obj[attribute]  # type: ignore[index]
            except (TypeError, LookupError):
                return self.undefined(obj=obj, name=attribute)
        if type(value) in _PLAIN_VALUES or (type(value) is _BUILTIN_METHOD and value.__name__ not in _STR_FORMAT):
            return value  # what wrap_str_format leaves alone: anything but a bound format/format_map
        fmt = self.wrap_str_format(value)
        return value if fmt is None else fmt

    def call(__self, __context: jinja2.runtime.Context, __obj: object, *args: object,  # noqa: N805 - jinja2's names
             **kwargs: object) -> object:
        if (type(__obj) is _BUILTIN_METHOD and type(__obj.__self__) is str  # type: ignore[attr-defined]
                and __obj.__name__ not in _STR_FORMAT):  # type: ignore[attr-defined]
            kwargs.pop("_block_vars", None)  # the generated code's own, which jinja2's Context.call drops too
            kwargs.pop("_loop_vars", None)
            return __obj(*args, **kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def is_safe_attribute(self, obj: object, attr: str, value: object) -> bool:
        key = (type(obj), attr)
        decision = self._attribute_decisions.get(key)
        if decision is None:
            decision = self._attribute_decisions[key] = super().is_safe_attribute(obj, attr, value)
        return decision


def environment() -> ImmutableSandboxedEnvironment:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[_GenerationTracker, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = hf_tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


@lru_cache(maxsize=16)
def compile_template(text: str) -> jinja2.Template:
    """The template compiled in its own sandbox (one per text, so its tracker is its own).

    Raises:
        jinja2.TemplateSyntaxError: the text is not a valid template.
    """
    return environment().from_string(text)


@lru_cache(maxsize=16)
def template_reads(text: str) -> frozenset[str]:
    """Every name a template mentions: variables, attributes, and string constants (``message['x']``,
    ``message.get('x')``). A field none of them names is one the template cannot read."""
    tree = environment().parse(text)
    names: set[str] = set()
    for node in tree.find_all((nodes.Name, nodes.Getattr, nodes.Const)):
        if isinstance(node, nodes.Name):
            names.add(node.name)
        elif isinstance(node, nodes.Getattr):
            names.add(node.attr)
        elif isinstance(node.value, str):
            names.add(node.value)
    return frozenset(names)




def run_marked(template: jinja2.Template, variables: dict) -> tuple[str, int]:
    """The text ``template`` (from `compile_template`) renders for ``variables``, with its generation
    blocks' marks, and how many blocks ran.

    Raises:
        RenderError: the template raised, or the sandbox refused an operation; the message is the reason.
    """
    tracker: _GenerationTracker = template.environment.extensions[_GenerationTracker.identifier]  # type: ignore[assignment]
    tracker.start()
    try:
        marked = template.render(variables)
    except jinja2.exceptions.SecurityError as exc:
        raise RenderError(f"template raised: unsafe operation blocked by the sandbox: {exc}") from exc
    except jinja2.exceptions.TemplateError as exc:
        raise RenderError(f"template raised: {exc}") from exc
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - the template's own code failed: that record's reject
        raise RenderError(f"template raised {type(exc).__name__}: {exc}") from exc
    finally:
        opened = tracker.stop()
    return marked, opened
