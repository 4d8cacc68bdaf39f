"""Rendering and loss masks: exact against HF's own masks, and properties on the fixture tokenizer."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from conftest import FIXTURES, real_asset
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.chat import (
    ChatTemplate,
    LossPolicy,
    Renderer,
    load_template,
    require_markers,
)
from packcli.contract import IGNORE_INDEX
from packcli.errors import InputError
from packcli.prepare import Preparer
from packcli.tokenizer.load import load_tokenizer

# The render engines a sandbox test runs on: jinja2's sandbox, and minijinja where installed (the render extra),
# told to render directly, bypassing the start-up probe (docs/render-backends.md).
ENGINES = ["jinja2", pytest.param("minijinja", marks=pytest.mark.skipif(
    importlib.util.find_spec("minijinja") is None, reason="minijinja is not installed"))]


def preparer(tokenizer, template: ChatTemplate, policy=LossPolicy.auto, engine: str = "jinja2") -> Preparer:
    return Preparer(Renderer(template, policy, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token,
                             engine=engine), tokenizer)


def encode(prep: Preparer, obj: dict):
    return prep.prepare([(0, 1, json.dumps(obj).encode())])[0]


def corpus_conversations(limit: int = 80) -> list[list[dict]]:
    """The fixture's OpenAI conversations with content as strings (Qwen3's and Llama 3's templates read strings)."""
    lines = (FIXTURES / "corpus" / "openai.jsonl").read_text(encoding="utf-8").split("\n")[:limit]
    convs = []
    for line in filter(None, lines):  # split on \n only: contents hold U+2028, which splitlines() splits on
        msgs = json.loads(line)["messages"]
        convs.append([{"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
                       else "".join(p["text"] for p in m["content"])} for m in msgs])
    return convs


@pytest.mark.real
@pytest.mark.parametrize("model,template", [("qwen3", "qwen3_training.jinja"), ("llama3_2", "llama3_training.jinja")])
def test_masks_equal_transformers_oracle(model, template):
    """Token ids and assistant masks equal HF apply_chat_template(return_assistant_tokens_mask=True)."""
    transformers = pytest.importorskip("transformers")
    tok_dir = real_asset(model)
    text = real_asset("templates", template).read_text()
    hf = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    prep = preparer(load_tokenizer(tok_dir), ChatTemplate(text, template), LossPolicy.assistant)
    convs = corpus_conversations()
    assert len(convs) >= 50
    checked = 0
    for msgs in convs:
        if not any(m["role"] == "assistant" for m in msgs):
            continue
        oracle = hf.apply_chat_template(msgs, chat_template=text, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
        enc = encode(prep, {"messages": msgs})
        assert enc.input_ids.tolist() == list(oracle["input_ids"])
        mine = (enc.labels != IGNORE_INDEX).astype(int)
        # Ours also ignores the first label of every example (never a target when alone).
        assert mine[0] == 0 and mine[1:].tolist() == list(oracle["assistant_masks"])[1:]
        checked += 1
    assert checked >= 50


@pytest.mark.real
def test_llama_no_double_bos():
    tok = load_tokenizer(real_asset("llama3_2"))
    text = real_asset("templates", "llama3_training.jinja").read_text()
    enc = encode(preparer(tok, ChatTemplate(text, "llama3")), {"messages": [{"role": "user", "content": "hi"},
                                                                       {"role": "assistant", "content": "yo"}]})
    bos = tok.tokenizer.token_to_id("<|begin_of_text|>")
    assert enc.input_ids[0] == bos and enc.input_ids[1] != bos
    assert int(np.count_nonzero(enc.input_ids == bos)) == 1


def test_golden_layout_fixture_tokenizer(tokenizer):
    """The exact layout: which pieces are supervised (between [ ]) under the built-in ChatML."""
    prep = preparer(tokenizer, load_template("chatml"))
    enc = encode(prep, {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"},
                                     {"role": "assistant", "content": "Ciao."}]})
    pieces = []
    for tid, label in zip(enc.input_ids.tolist(), enc.labels.tolist()):
        piece = tokenizer.tokenizer.decode([tid], skip_special_tokens=False)
        pieces.append(f"[{piece}]" if label != IGNORE_INDEX else piece)
    layout = "".join(pieces).replace("][", "")
    assert layout == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                      "<|im_start|>assistant\n[Hello!<|im_end|>]\n<|im_start|>user\nBye<|im_end|>\n"
                      "<|im_start|>assistant\n[Ciao.<|im_end|>]\n")


def test_last_assistant_policy(tokenizer):
    prep = preparer(tokenizer, load_template("chatml"), LossPolicy.last_assistant)
    enc = encode(prep, {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "first"},
                                     {"role": "user", "content": "b"}, {"role": "assistant", "content": "second"}]})
    sup = enc.input_ids[enc.labels != IGNORE_INDEX].tolist()
    assert tokenizer.tokenizer.decode(sup, skip_special_tokens=False) == "second<|im_end|>"


def test_template_without_markers_is_refused(tokenizer):
    plain = ChatTemplate("{% for m in messages %}{{ m['content'] }}{% endfor %}", "plain.jinja")
    with pytest.raises(InputError, match="no \\{% generation %\\} markers"):
        require_markers(plain, LossPolicy.assistant)
    prep = preparer(tokenizer, plain, LossPolicy.auto)  # auto: the first chat record stops the run
    with pytest.raises(InputError, match="no \\{% generation %\\} markers"):
        encode(prep, {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})
    assert encode(prep, {"text": "plain text is fine"}).supervised > 0


def test_empty_mask_is_a_rejection(tokenizer):
    empty = ChatTemplate("{% for m in messages %}{{ m['content'] }}{% generation %}{% endgeneration %}{% endfor %}", "e")
    out = encode(preparer(tokenizer, empty, LossPolicy.assistant),
                 {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})
    assert isinstance(out, str) and "no supervised text" in out


CHAT = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}


@pytest.mark.parametrize("evil,blocked", [
    ("{{ ''.__class__.__name__ }}", "__class__"),
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "__class__"),
    ("{{ raise_exception.__globals__.keys() }}", "__globals__"),
    ("{{ strftime_now.__globals__['__builtins__'] }}", "__globals__"),
    ("{{ namespace.__init__.__globals__ }}", "__init__"),
    ("{{ messages.__init__(messages) }}", "__init__"),
    ("{{ messages.append(1) }}", "append"),  # the immutable sandbox: no mutating a list it was given
    ("{% for m in messages %}{{ m.update({'role': 'x'}) }}{% endfor %}", "update"),
    ("{% for m in messages %}{{ m.__class__.__subclasses__() }}{% endfor %}", "__class__"),  # a dict's attribute, not its key
    ("{{ '{0.__class__.__mro__}'.format(messages) }}", "__class__"),  # str.format is wrapped by the sandbox
    ("{{ '{x.__class__.__mro__}'.format_map({'x': messages}) }}", "__class__"),
    ("{% set ns = namespace(a=1) %}{{ ns._Namespace__attrs.clear() }}", "_Namespace__attrs"),
])
@pytest.mark.parametrize("engine", ENGINES)
def test_sandbox_blocks_unsafe_templates_every_time(tokenizer, evil, blocked, engine):
    """Each unsafe access is refused by jinja2's own sandbox, on every record: the record's reject, naming it,
    and the data the template was given is untouched; under either engine."""
    prep = preparer(tokenizer, ChatTemplate(evil + "{% generation %}x{% endgeneration %}", "evil"), LossPolicy.assistant,
                    engine)
    record = json.loads(json.dumps(CHAT))
    for _ in range(2):
        out = encode(prep, record)
        assert isinstance(out, str) and out.startswith("template raised") and blocked in out, out
    assert record == CHAT


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("peek", ["''.__class__", "raise_exception.__globals__", "namespace.__init__", "messages.append"])
def test_an_unsafe_attribute_printed_alone_prints_nothing(peek, engine):
    """Printing the blocked attribute itself gives the sandbox's empty undefined, never the object (either engine)."""
    from packcli.ingest import parse_record

    renderer = Renderer(ChatTemplate(f"[{{{{ {peek} }}}}]{{% for m in messages %}}{{{{ m.content }}}}{{% endfor %}}"
                                     "{% generation %}x{% endgeneration %}", "t"), LossPolicy.assistant,
                        bos_token=None, eos_token=None, engine=engine)
    record = parse_record(json.dumps(CHAT).encode(), file_index=0, line=1)
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


class _Slots:
    __slots__ = ("a",)


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


@pytest.mark.parametrize("engine", ENGINES)
def test_template_errors_are_the_records_reject_never_a_traceback(tokenizer, engine):
    """``raise_exception``, the sandbox's range limit and any other error inside the template: a reject, worded
    by jinja2 under either engine."""
    chat = CHAT
    raising = ChatTemplate("{% if messages[0].role != 'system' %}{{ raise_exception('needs a system turn') }}{% endif %}"
                           "{% generation %}x{% endgeneration %}", "raising")
    assert encode(preparer(tokenizer, raising, LossPolicy.assistant, engine), chat) == "template raised: needs a system turn"
    huge = ChatTemplate("{{ range(10**9) | list | length }}{% generation %}x{% endgeneration %}", "huge")
    out = encode(preparer(tokenizer, huge, LossPolicy.assistant, engine), chat)
    assert out.startswith("template raised OverflowError: Range too big"), out
    buggy = ChatTemplate("{% generation %}x{% endgeneration %}\n\n{{ 1 + messages }}", "buggy")
    out = encode(preparer(tokenizer, buggy, LossPolicy.assistant, engine), chat)
    assert out.startswith("template raised TypeError: unsupported operand"), out


def test_template_errors_through_the_cli_are_rejects_with_exit_0(tmp_path, tokenizer_dir):
    from typer.testing import CliRunner

    from packcli.cli import app

    (tmp_path / "huge.jinja").write_text("{{ range(10**9) | list }}{% generation %}x{% endgeneration %}")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(CHAT) + "\n" + json.dumps({"text": "plain text still packs"}) + "\n")
    result = CliRunner().invoke(app, ["pack", str(data), "-t", str(tokenizer_dir), "--template",
                                      str(tmp_path / "huge.jinja"), "-o", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"][:41]) for r in rejects] == [(1, "template raised OverflowError: Range too ")]


def test_strftime_now_formats_the_pinned_date(tokenizer):
    """Any format, one date: the same text on every run; another date is another text (a pack option)."""
    from datetime import date

    from packcli.ingest import parse_record

    template = ChatTemplate("{{ strftime_now('%Y-%m-%d %A %d %b %Y %H:%M') }}|{% for m in messages %}{{ m.content }}"
                            "{% endfor %}{% generation %}x{% endgeneration %}", "d")
    record = parse_record(json.dumps(CHAT).encode(), file_index=0, line=1)
    pinned = Renderer(template, LossPolicy.assistant, bos_token=None, eos_token=None).render(record)
    assert pinned.text.split("|")[0] == "2024-07-26 Friday 26 Jul 2024 00:00"
    other = Renderer(template, LossPolicy.assistant, bos_token=None, eos_token=None, template_date=date(2025, 1, 2))
    assert other.render(record).text.split("|")[0] == "2025-01-02 Thursday 02 Jan 2025 00:00"


def test_policy_kind_mismatches_are_rejections(tokenizer):
    prep = preparer(tokenizer, load_template("chatml"), LossPolicy.assistant)
    assert "does not apply to plain text" in encode(prep, {"text": "x"})
    prep = preparer(tokenizer, load_template("chatml"), LossPolicy.completion)
    assert "applies to prompt/completion" in encode(prep, {"messages": [{"role": "assistant", "content": "x"}]})


def test_padding_inside_tokenizer_file_is_ignored(tmp_path, tokenizer_dir):
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    data["padding"] = {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": 0, "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    enc = encode(preparer(tok, load_template("chatml")), {"text": "short"})
    assert len(enc.input_ids) < 20


@pytest.mark.parametrize("content", ["", "not json {", "[]"])
def test_corrupt_tokenizer_is_a_clear_error(tmp_path, content):
    (tmp_path / "tokenizer.json").write_text(content)
    with pytest.raises(InputError, match="not a valid tokenizer.json"):
        load_tokenizer(tmp_path / "tokenizer.json")


def test_missing_tokenizer(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_tokenizer(tmp_path / "nope.json")
    with pytest.raises(InputError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)


text_st = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<>"), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(text_st, text_st), min_size=1, max_size=4), st.booleans())
def test_supervised_tokens_decode_to_assistant_contents(tokenizer, turns, system):
    """Property: the supervised tokens decode to exactly what the assistant said, plus end-of-turn."""
    msgs = [{"role": "system", "content": "sys"}] if system else []
    for user, assistant in turns:
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    enc = encode(preparer(tokenizer, load_template("chatml"), LossPolicy.assistant), {"messages": msgs})
    sup = enc.labels != IGNORE_INDEX
    # Split supervised tokens into runs; each run is one assistant turn.
    runs, current = [], []
    for tid, s in zip(enc.input_ids.tolist(), sup.tolist()):
        if s:
            current.append(tid)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    decoded = [tokenizer.tokenizer.decode(r, skip_special_tokens=False) for r in runs]
    assert decoded == [a + "<|im_end|>" for _, a in turns]

