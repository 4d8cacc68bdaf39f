"""Rendering and loss masks: exact against HF's own masks, and properties on the fixture tokenizer."""

from __future__ import annotations

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


def preparer(tokenizer, template: ChatTemplate, policy=LossPolicy.auto) -> Preparer:
    return Preparer(Renderer(template, policy, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token), tokenizer)


def encode(prep: Preparer, obj: dict):
    return prep.prepare([(0, 1, json.dumps(obj).encode())])[0]


def corpus_conversations(limit: int = 80) -> list[list[dict]]:
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


@pytest.mark.parametrize("evil", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.append(1) }}",  # the immutable sandbox: no mutating a list it was given
    "{% for m in messages %}{{ m.update({'role': 'x'}) }}{% endfor %}",
    "{% for m in messages %}{{ m.__class__.__subclasses__() }}{% endfor %}",  # a dict's attribute, not its key
    "{{ '{0.__class__.__mro__}'.format(messages) }}",  # str.format is still wrapped by the sandbox
    "{{ '{x.__class__.__mro__}'.format_map({'x': messages}) }}",
    "{% set ns = namespace(a=1) %}{{ ns._Namespace__attrs.clear() }}",  # a namespace's own storage stays hidden
])
def test_sandbox_blocks_unsafe_templates_every_time(tokenizer, evil):
    """Rendered twice by the same renderer: the memoized attribute verdicts block the second time too."""
    prep = preparer(tokenizer, ChatTemplate(evil + "{% generation %}x{% endgeneration %}", "evil"), LossPolicy.assistant)
    for _ in range(2):
        with pytest.raises(InputError, match="sandbox"):
            encode(prep, {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})


def test_sandbox_fast_attribute_access_matches_jinja():
    """The shortcut for plain dicts and built-ins gives what Jinja's own sandbox gives."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from packcli.chat.render import _Sandbox

    text = ("{% for m in messages %}{{ m.role }}|{{ m.content.strip().upper() }}|{{ m.missing is defined }}|"
            "{{ m.items is defined }}|{{ m.get('role') }}|{{ m.keys is defined }}|{{ 'x{}'.format(m.role) }}|"
            "{{ loop.index }}|{{ (1.5).real }}|{{ m.content.nope is defined }}|{{ m.content.split(maxsplit=1) }}|"
            "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex0 }}{{ loop.previtem is defined }}|"
            "{{ m.content.replace(' ', '_', 1) }}|{{ m['content'].startswith((' ', 'y')) }}\n{% endfor %}")
    messages = [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo", "items": 1}]
    assert _Sandbox().from_string(text).render(messages=messages) == \
        ImmutableSandboxedEnvironment().from_string(text).render(messages=messages)


SHORTCUT_TEMPLATES = [
    # a namespace read, set and missing; a generation body that sets a variable (scoped to the block)
    "{% set ns = namespace(n=0, last='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{{ m.role }}:{% if m.role == 'assistant' %}{% generation %}{% set x = m.content | upper %}"
    "{{ x }}#{{ ns.n }}{{ ns.missing is defined }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}"
    "{% set x = 'outer' %}|{% endfor %}{{ ns.n }}{{ x }}",
    # a generation body that calls caller-like things and loops with loop.* inside the block
    "{% for m in messages %}{% generation %}{% for c in m.content[:3] %}{{ loop.index }}{{ c }}{% endfor %}"
    "{% endgeneration %}{{ loop.revindex }}{% endfor %}",
    # a body reading ``kwargs``/``varargs`` makes the block's macro take them: it must be called as a macro
    "{% for m in messages %}{% generation %}{{ m.content }}{{ kwargs | length }}{{ varargs | length }}"
    "{% endgeneration %}{% endfor %}",
]


@pytest.mark.parametrize("text", SHORTCUT_TEMPLATES + ["chatml", "real:qwen3_training.jinja", "real:llama3_training.jinja"])
def test_render_shortcuts_match_jinjas_own_paths(monkeypatch, text):
    """With the sandbox's shortcuts switched off (``MEMO_SAFE``: what it does on another jinja2), every
    attribute, call and generation block goes through Jinja's own code: the text and spans must agree."""
    from packcli.chat.render import _Sandbox
    from packcli.ingest import Kind, Message, Record

    if text.startswith("real:"):
        template = load_template(str(real_asset("templates", text[5:])))
    else:
        template = load_template(text) if text == "chatml" else ChatTemplate(text, "inline")
    records = [Record(0, k, Kind.chat, messages=tuple(Message(m["role"], m["content"]) for m in conv))
               for k, conv in enumerate(corpus_conversations(40))]
    rendered = {}
    for shortcuts in (True, False):
        monkeypatch.setattr(_Sandbox, "MEMO_SAFE", shortcuts)
        renderer = Renderer(template, LossPolicy.assistant, bos_token="<s>", eos_token="</s>")
        rendered[shortcuts] = [(r.text, r.spans) for r in map(renderer.render, records)]
    assert rendered[True] == rendered[False]
    assert any(spans for _, spans in rendered[True])


def test_template_errors_keep_their_meaning_and_their_template_line(tokenizer):
    """``raise_exception`` rejects the record with the template's message; any other error inside the
    template is not bad data but a template bug: it propagates, with a traceback at the template's own
    line (what Jinja's ``generate`` gives, which the renderer no longer calls)."""
    import traceback

    chat = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    raising = ChatTemplate("{% if messages[0].role != 'system' %}{{ raise_exception('needs a system turn') }}{% endif %}"
                           "{% generation %}x{% endgeneration %}", "raising")
    assert encode(preparer(tokenizer, raising, LossPolicy.assistant), chat) == "template raised: needs a system turn"
    buggy = ChatTemplate("{% generation %}x{% endgeneration %}\n\n{{ 1 + messages }}", "buggy")
    with pytest.raises(TypeError) as info:
        encode(preparer(tokenizer, buggy, LossPolicy.assistant), chat)
    assert ("<template>", 3) in [(f.filename, f.lineno) for f in traceback.extract_tb(info.tb)]


def test_sandbox_memo_keys_on_type_and_attribute():
    from packcli.chat.render import _Sandbox

    env = _Sandbox()
    for _ in range(2):
        assert env.is_safe_attribute("x", "upper", str.upper) and env.is_safe_attribute({}, "get", {}.get)
        assert not env.is_safe_attribute([], "append", [].append) and not env.is_safe_attribute({}, "update", {}.update)
        assert not env.is_safe_attribute("x", "__class__", str)


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

