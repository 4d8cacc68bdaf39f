"""`packcli.chat.sandbox`: templates render in jinja2's own immutable sandbox (compiled once, its attribute and
str-method decisions remembered exactly as jinja2 makes them), and the generation marks are found where a
template prints them, or the record is rejected."""

from __future__ import annotations

import json

import pytest
from conftest import RENDER_ENGINES, TINY_CHAT

from packcli.chat import ChatTemplate, LossPolicy, Renderer, load_template


@pytest.mark.parametrize("engine", RENDER_ENGINES)
@pytest.mark.parametrize("peek", ["''.__class__", "raise_exception.__globals__", "namespace.__init__", "messages.append"])
def test_an_unsafe_attribute_printed_alone_prints_nothing(peek, engine):
    """Printing the blocked attribute itself gives the sandbox's empty undefined, never the object (either engine)."""
    from packcli.ingest import parse_record

    renderer = Renderer(ChatTemplate(f"[{{{{ {peek} }}}}]{{% for m in messages %}}{{{{ m.content }}}}{{% endfor %}}"
                                     "{% generation %}x{% endgeneration %}", "t"), LossPolicy.assistant,
                        bos_token=None, eos_token=None, engine=engine)
    record = parse_record(json.dumps(TINY_CHAT).encode(), file_index=0, line=1)
    assert renderer.render(record).text == "[]abx"
    assert len(record.messages) == 2


def test_renders_with_jinjas_own_sandbox_compiled_once():
    """jinja2's sandbox with only its attribute lookups and its calls of ``str`` methods overridden (each shown
    equal to jinja2's below); one compiled template per text."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from packcli.chat.sandbox import compile_template

    text = load_template("chatml").text
    first = Renderer(load_template("chatml"), LossPolicy.assistant, bos_token=None, eos_token=None)
    second = Renderer(load_template("chatml"), LossPolicy.all, bos_token="<s>", eos_token="</s>")
    sandbox = type(compile_template(text).environment)
    assert sandbox.__mro__[1] is ImmutableSandboxedEnvironment
    assert {name for name in vars(sandbox) if not name.startswith("__")} == {"getattr", "is_safe_attribute", "call"}
    assert first._template is second._template is compile_template(text)


def _generator():
    yield 1


def test_remembered_attribute_decisions_are_jinjas():
    """Every (object, attribute) decision of packcli's sandbox equals jinja2's own, asked first and again from
    memory, for the objects a template can reach and the attributes that are refused, allowed, or mutate."""
    import collections

    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from packcli.chat.sandbox import _TemplateDict, _TemplateNamespace, environment

    ours, jinjas = environment(), ImmutableSandboxedEnvironment()
    objects = [{"role": "user"}, {}, ["a"], [], "text", "", 1, 1.5, True, None, {1, 2}, frozenset(), (1,),
               collections.deque([1]), collections.OrderedDict(a=1), _TemplateDict(), _TemplateNamespace(a=1),
               jinja2.utils.Namespace(), _raise, _raise.__get__(1), str.split, "x".split, type, dict, _generator(),
               _generator().gi_frame, _raise.__code__, _Slots(), jinja2.Undefined()]
    names = ["append", "pop", "update", "clear", "add", "popleft", "setdefault", "items", "keys", "get", "split",
             "strip", "format", "format_map", "mro", "real", "role", "a", "fromkeys", "__class__", "__globals__",
             "__init__", "__mro__", "__subclasses__", "__code__", "_Namespace__attrs", "_x", "func_code",
             "gi_frame", "gi_code", "f_globals", "co_code", "__self__", "__func__", "__dict__"]
    for _ in range(2):
        for obj in objects:
            for name in names:
                for value in (None, obj, 0):
                    assert ours.is_safe_attribute(obj, name, value) == jinjas.is_safe_attribute(obj, name, value), \
                        (obj, name)
    assert not ours.is_safe_attribute([], "append", None) and ours.is_safe_attribute([], "index", None)
    holder = _TemplateNamespace(format="{0}".format, strip="x".strip, n=1)  # a format method read from a namespace
    loop = jinja2.runtime.LoopContext(iter("ab"), jinja2.Undefined)
    objects += [holder, loop]
    names += ["n", "index0", "first", "last", "length", "cycle", "nextitem"]
    reader = environment()  # every read answered first before any decision is remembered, then from memory
    for _ in range(2):
        for obj in objects:
            for name in names:
                _same_read(_outcome(reader.getattr, obj, name), _outcome(jinjas.getattr, obj, name), obj, name)
    assert reader._attribute_decisions[(str, "strip")] and not reader._attribute_decisions[(list, "append")]
    shadowed = {"items": "an item called items", "role": "user"}  # a key named like a dict method: the method
    assert ours.getattr(shadowed, "items") == shadowed.items and ours.getattr(shadowed, "role") == "user"
    assert ours.getattr(holder, "format") is not holder.format and ours.getattr(holder, "format")(7) == "7"


def test_calls_of_str_methods_are_jinjas():
    """A ``str`` method called from a template (in and out of loops, which pass jinja2's own ``_loop_vars``)
    gives what jinja2's sandbox gives; ``format`` stays sandboxed and an unsafe callable stays refused."""
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment, unsafe

    from packcli.chat.sandbox import environment

    ours, jinjas = environment(), ImmutableSandboxedEnvironment()
    template = ("{{ ' x '.strip() }}{% for m in ms %}{% set n = namespace(k=m.lstrip('-')) %}[{{ n.k.strip() }}|"
                "{{ m.split(sep=',') | join('+') }}|{{ m.startswith('a') }}|{{ m.replace('a', 'b', 1) }}|"
                "{{ '{0}-{1}'.format(m, loop.index) }}|{{ m.rsplit(',', maxsplit=1) | length }}]{% endfor %}")
    words = ["a,b,c", " -a ", "", "aaa", "x,y"]
    assert ours.from_string(template).render(ms=words) == jinjas.from_string(template).render(ms=words)
    context = ours.from_string("").new_context()
    with pytest.raises(SecurityError):
        ours.call(context, unsafe(lambda: 1))
    with pytest.raises(SecurityError):  # the field lookup inside format is the sandbox's
        ours.from_string("{{ '{0.__class__.__mro__}'.format(1) }}").render()


def _same_read(mine, theirs, obj, name) -> None:
    """packcli's sandbox read ``obj.name`` as jinja2's did: the same value, or the same refusal."""
    import jinja2

    assert isinstance(mine, jinja2.Undefined) == isinstance(theirs, jinja2.Undefined), (obj, name)
    if isinstance(mine, jinja2.Undefined):  # the same refusal: unsafe, or simply missing
        assert (mine._undefined_exception, mine._undefined_hint) == \
               (theirs._undefined_exception, theirs._undefined_hint), (obj, name)
    elif hasattr(theirs, "__wrapped__"):  # str.format: a fresh sandboxed wrapper each time
        assert mine.__wrapped__ == theirs.__wrapped__ and mine is not theirs.__wrapped__, (obj, name)
    else:
        assert mine == theirs, (obj, name)


def _raise():
    raise AssertionError("never called")


def _outcome(getattr_, obj, name):
    """What reading ``obj.name`` gives: the value, or the type of the error it raises (an undefined's reads)."""
    try:
        return getattr_(obj, name)
    except Exception as exc:  # noqa: BLE001
        return type(exc)


def _spans_of(template: str, messages: list[dict]):
    from packcli.ingest import parse_record
    record = parse_record(json.dumps({"messages": messages}).encode(), file_index=0, line=1)
    rendered = Renderer(ChatTemplate(template, "t"), LossPolicy.assistant, bos_token=None, eos_token=None).render(record)
    return rendered.text, [rendered.text[s:e] for s, e in rendered.spans]


def test_generation_block_printed_by_a_macro_or_a_set_block_is_found_where_it_lands():
    """A block's marks travel with its text, so a macro or ``{% set %}`` that prints it later still puts the loss on
    exactly that text (a tracker that counted the output so far would put it before the macro's own text)."""
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]
    macro = ("{% macro turn(m) %}<{{ m.role }}>{% generation %}{{ m.content }}!{% endgeneration %}{% endmacro %}"
             "{% for m in messages %}{% if m.role == 'assistant' %}{{ turn(m) }}{% else %}{{ m.content }}{% endif %}"
             "{% endfor %}")
    assert _spans_of(macro, chat) == ("hi<assistant>yes!", ["yes!"])
    later = ("{% set answer %}{% generation %}{{ messages[1].content }}{% endgeneration %}{% endset %}"
             "{{ messages[0].content }}|{{ answer }}|")
    assert _spans_of(later, chat) == ("hi|yes|", ["yes"])
    nested = "{{ messages[0].content }}{% generation %}a{% generation %}{{ messages[1].content }}{% endgeneration %}b{% endgeneration %}"
    assert _spans_of(nested, chat) == ("hiayesb", ["yes", "ayesb"])


def test_generation_marks_that_do_not_pair_up_are_the_records_reject():
    """A record whose text holds a mark itself, or a template that cuts a mark off or prints a block's end first:
    a reject naming why, never a span moved or a character of the record dropped."""
    from packcli.chat import RenderError

    plain = "{% for m in messages %}{{ m.content }}{% if m.role == 'assistant' %}{% generation %}.{% endgeneration %}{% endif %}{% endfor %}"
    for text in ("a \ufdd0 b", "\ufdd1", "\ufdd0\ufdd1"):
        with pytest.raises(RenderError, match="U\\+FDD0 or U\\+FDD1"):
            _spans_of(plain, [{"role": "user", "content": text}, {"role": "assistant", "content": "x"}])
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]
    cut = "{% set a %}{% generation %}{{ messages[1].content }}{% endgeneration %}{% endset %}{{ messages[0].content }}{{ a[1:] }}"
    with pytest.raises(RenderError, match="cut a generation block's mark off"):
        _spans_of(cut, chat)
    backwards = ("{% set a %}{% generation %}{{ messages[1].content }}{% endgeneration %}{% endset %}"
                 "{{ messages[0].content }}{{ a | reverse }}")
    with pytest.raises(RenderError, match="end before its start"):
        _spans_of(backwards, chat)


@pytest.mark.parametrize("order", ["messages", "messages | reverse"])
def test_content_found_round_by_round_and_lost_content_found_nowhere(order):
    """Each message is found in its round, rounds in order (packcli.chat.guards): a template that prints the
    conversation in order passes; one that prints the rounds backwards, or drops a turn, is a rejection."""
    from packcli.chat import RenderError
    from packcli.ingest import parse_record

    chat = {"messages": [{"role": "user", "content": "first question"}, {"role": "assistant", "content": "answer"},
                         {"role": "user", "content": "second\n  question"}, {"role": "assistant", "content": "fine"}]}
    body = f"{{% for m in {order} %}}{{{{ m.content }}}}|{{% endfor %}}"
    renderer = Renderer(ChatTemplate(body, "t"), LossPolicy.all, bos_token=None, eos_token=None)
    record = parse_record(json.dumps(chat).encode(), file_index=0, line=1)
    if order == "messages":
        assert "first question" in renderer.render(record).text
    else:
        with pytest.raises(RenderError, match=r"message 1 \(assistant\): content lost"):
            renderer.render(record)
    dropping = Renderer(ChatTemplate(f"{{% for m in {order} %}}{{% if m.content != 'answer' %}}{{{{ m.content }}}}"
                                     "{% endif %}|{% endfor %}", "t"), LossPolicy.all, bos_token=None, eos_token=None)
    with pytest.raises(RenderError, match=r"message 1 \(assistant\): content lost"):
        dropping.render(record)


class _Slots:
    __slots__ = ("a",)
