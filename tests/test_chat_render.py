"""`packcli.chat.render`: rendering and loss masks, exact against HF's masks; properties on the fixture tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FIXTURES, RENDER_ENGINES, TINY_CHAT, real_asset
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.chat import ChatTemplate, LossPolicy, Renderer, load_template, require_markers
from packcli.contract import IGNORE_INDEX
from packcli.errors import InputError
from packcli.prepare import Preparer
from packcli.tokenizer.load import load_tokenizer


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
@pytest.mark.parametrize("engine", RENDER_ENGINES)
def test_sandbox_blocks_unsafe_templates_every_time(tokenizer, evil, blocked, engine):
    """Each unsafe access is refused by jinja2's own sandbox, on every record: the record's reject, naming it,
    and the data the template was given is untouched; under either engine."""
    prep = preparer(tokenizer, ChatTemplate(evil + "{% generation %}x{% endgeneration %}", "evil"), LossPolicy.assistant,
                    engine)
    record = json.loads(json.dumps(TINY_CHAT))
    for _ in range(2):
        out = encode(prep, record)
        assert isinstance(out, str) and out.startswith("template raised") and blocked in out, out
    assert record == TINY_CHAT


@pytest.mark.parametrize("engine", RENDER_ENGINES)
def test_template_errors_are_the_records_reject_never_a_traceback(tokenizer, engine):
    """``raise_exception``, the sandbox's range limit and any other error inside the template: a reject, worded
    by jinja2 under either engine."""
    chat = TINY_CHAT
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
    data.write_text(json.dumps(TINY_CHAT) + "\n" + json.dumps({"text": "plain text still packs"}) + "\n")
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
    record = parse_record(json.dumps(TINY_CHAT).encode(), file_index=0, line=1)
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
