"""Tool calls, reasoning, content shapes, turns and weights: what the template sees, and what carries loss.

The claims about transformers are checked against transformers itself: ``apply_chat_template(...,
tools=..., return_assistant_tokens_mask=True)`` with the same tokenizer gives the same tokens and masks.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import numpy as np
import pytest
from chat_data import tool_conversations
from conftest import real_asset

from packcli.chat import ChatTemplate, LossPolicy, Renderer, RenderError, load_template
from packcli.contract import IGNORE_INDEX
from packcli.ingest import parse_record
from packcli.prepare import Preparer
from packcli.tokenizer.load import load_tokenizer

GOLDEN = [  # (tokenizer, TRL template, tool-call arguments may be JSON strings)
    ("qwen3", "qwen3_training", True),
    ("qwen3", "qwen3_5_think_training", False),  # reads arguments with |items: objects only
    ("llama3_2", "gptoss_training", False),  # reads `thinking` (aliased), prints strftime_now's date
]


def record(obj: dict, line: int = 1):
    return parse_record(json.dumps(obj).encode(), file_index=0, line=line)


def render(template: ChatTemplate | str, obj: dict, policy=LossPolicy.assistant, **kw):
    template = template if isinstance(template, ChatTemplate) else ChatTemplate(template, "inline")
    return Renderer(template, policy, bos_token=kw.get("bos"), eos_token=kw.get("eos")).render(record(obj))


def supervised(rendered) -> list[str]:
    return [rendered.text[s:e] for s, e in rendered.spans]


def trl(name: str) -> ChatTemplate:
    return load_template(str(real_asset("templates", f"{name}.jinja")))


def pinned_transformers_date(monkeypatch, text: str) -> None:
    """transformers' strftime_now reads the clock; pin it to packcli's default date for the comparison."""
    from transformers.utils import chat_template_utils

    env = chat_template_utils._compile_jinja_template(text).environment
    monkeypatch.setitem(env.globals, "strftime_now", lambda fmt: datetime(2024, 7, 26).strftime(fmt))


@pytest.mark.real
@pytest.mark.parametrize("backend", ["tokenizers", "fastokens"])
@pytest.mark.parametrize("model,name,string_arguments", GOLDEN)
def test_tool_calls_and_reasoning_equal_transformers(monkeypatch, model, name, string_arguments, backend):
    """Tokens and labels identical to transformers' apply_chat_template with tools, on every conversation."""
    transformers = pytest.importorskip("transformers")
    text = trl(name).text
    pinned_transformers_date(monkeypatch, text)
    hf = transformers.AutoTokenizer.from_pretrained(str(real_asset(model)))
    tok = load_tokenizer(real_asset(model), backend=backend, paranoid=True)
    assert tok.backend_name == backend
    prep = Preparer(Renderer(ChatTemplate(text, name), LossPolicy.assistant, bos_token=tok.bos_token,
                             eos_token=tok.eos_token), tok)
    records = tool_conversations(30, string_arguments=string_arguments)
    assert sum("reasoning_content" in m for r in records for m in r["messages"]) > 10
    prepared = prep.prepare([(0, i + 1, json.dumps(r).encode()) for i, r in enumerate(records)])
    for rec, enc in zip(records, prepared):
        if name == "gptoss_training" and any(len(m.get("tool_calls") or ()) > 1 for m in rec["messages"]):
            # gpt-oss prints one call per message and drops the others: never trained on as if printed
            assert isinstance(enc, str) and "tool_calls[1]" in enc and "lost in rendering" in enc, enc
            continue
        assert not isinstance(enc, str), enc
        oracle = hf.apply_chat_template(rec["messages"], tools=rec["tools"], chat_template=text, tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True)
        assert enc.input_ids.tolist() == list(oracle["input_ids"])
        mask = (enc.labels != IGNORE_INDEX).astype(int).tolist()
        assert mask[0] == 0 and mask[1:] == list(oracle["assistant_masks"])[1:]  # ours ignores the first label
        assert sum(mask) > 0


@pytest.mark.real
@pytest.mark.slow
def test_packed_tool_calls_equal_transformers_and_verify(tmp_path, monkeypatch):
    """pack -> the artifact's tokens and labels per example are transformers'; verify reconstructs every one."""
    transformers = pytest.importorskip("transformers")
    from packcli.config import PackConfig
    from packcli.data import iter_packs
    from packcli.job.run import pack_corpus
    from packcli.verify import verify_artifact

    template = real_asset("templates", "qwen3_training.jinja")
    records = tool_conversations(60, seed=3)
    data = tmp_path / "tools.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "packed"
    summary = pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(real_asset("qwen3")), out=out, capacity=2048,
                                     template=str(template), tokenizer_backend="fastokens"))
    assert summary.manifest["counts"]["packed"] == len(records)
    assert summary.manifest["unhashed"]["input_warnings"]["ignored_fields"] == {"tool_call_id": len(records)}
    hf = transformers.AutoTokenizer.from_pretrained(str(real_asset("qwen3")))
    text = template.read_text()
    import pyarrow.parquet as pq

    seam = pq.read_table(out / "examples.parquet").to_pydict()
    line_of = dict(zip(seam["example_id"], seam["line"]))
    checked = 0
    for pack in iter_packs(out):
        bounds = pack.cu_seqlens.tolist()
        for k, eid in enumerate(pack.example_ids.tolist()):
            rec = records[line_of[eid] - 1]
            oracle = hf.apply_chat_template(rec["messages"], tools=rec["tools"], chat_template=text, tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True)
            ids, labels = pack.input_ids[bounds[k]:bounds[k + 1]], pack.labels[bounds[k]:bounds[k + 1]]
            assert ids.tolist() == list(oracle["input_ids"])
            want = np.where(np.asarray(oracle["assistant_masks"]) == 1, ids, IGNORE_INDEX)
            want[0] = IGNORE_INDEX
            assert labels.tolist() == want.tolist()
            checked += 1
    assert checked == len(records)
    report = verify_artifact(out)
    assert report.ok, [(c.name, [v.message for v in c.violations]) for c in report.checks if not c.ok]


QUESTION = {"role": "user", "content": "Weather in Paris?"}
CALL = {"role": "assistant", "content": None, "reasoning_content": "Use the tool.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
ANSWER = {"role": "assistant", "content": "It is sunny.", "reasoning_content": "Answer briefly."}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.mark.real
def test_qwen3_sees_tools_calls_and_reasoning():
    """The issue's case: tools in the system prompt, the call and the reasoning rendered and supervised."""
    out = render(trl("qwen3_training"), {"tools": TOOLS, "messages": [QUESTION, CALL, RESULT, ANSWER]})
    assert '"name": "get_weather"' in out.text.split("<|im_start|>user")[0]  # the schema, in the system turn
    first, last = supervised(out)
    assert first == ('<think>\nUse the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
                     '{"city": "Paris"}}\n</tool_call><|im_end|>\n')
    assert last == "<think>\nAnswer briefly.\n</think>\n\nIt is sunny.<|im_end|>\n"
    assert "sunny" not in first and "<tool_response>" not in "".join(supervised(out))  # tool results: never


@pytest.mark.real
@pytest.mark.parametrize("name", ["phi3_training", "phi3_5_training"])
def test_last_assistant_supervises_every_block_of_the_final_turn_phi3(name):
    """Phi-3 closes the final turn with a second block (the EOS): both it and the answer are supervised."""
    conv = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "first"},
                         {"role": "user", "content": "b"}, {"role": "assistant", "content": "final answer"}]}
    out = render(trl(name), conv, LossPolicy.last_assistant, eos="<|endoftext|>")
    assert supervised(out) == ["final answer<|end|>\n", "<|endoftext|>"]
    everything = render(trl(name), conv, LossPolicy.assistant, eos="<|endoftext|>")
    assert supervised(everything) == ["first<|end|>\n", "final answer<|end|>\n", "<|endoftext|>"]


@pytest.mark.real
def test_last_assistant_supervises_every_block_of_the_final_turn_diffusion_gemma():
    """DiffusionGemma wraps one turn in several blocks (thinking, tool calls, content, the closing marker)."""
    conv = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                         QUESTION, CALL, RESULT, ANSWER]}
    every = supervised(render(trl("diffusion_gemma_training"), conv, LossPolicy.assistant))
    last = supervised(render(trl("diffusion_gemma_training"), conv, LossPolicy.last_assistant))
    assert len(last) >= 3 and last == every[-len(last):]
    assert any("Answer briefly." in s for s in last) and "It is sunny." in last
    assert last[-1] == "<turn|>\n"
    assert not any("hello" in s or "get_weather" in s for s in last)  # earlier turns: not the final one


def test_last_assistant_refuses_a_template_that_is_not_prefix_preserving():
    """Turn boundaries are read off the template; where it re-renders an earlier block once a turn follows, refuse."""
    text = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}#{{ messages | length }}"
            "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")
    conv = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                         {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]}
    assert supervised(render(text, conv, LossPolicy.assistant)) == ["b#4", "d#4"]
    with pytest.raises(RenderError, match="message 3: cannot tell which generation blocks belong to it"):
        render(text, conv, LossPolicy.last_assistant)


def test_last_assistant_with_nothing_in_the_final_turn_is_a_rejection():
    text = ("{% for m in messages %}{{ m.content }}{% if m.role == 'assistant' and not loop.last %}{% generation %}#"
            "{% endgeneration %}{% endif %}{% endfor %}")
    conv = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                         {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]}
    assert supervised(render(text, conv, LossPolicy.assistant)) == ["#"]
    with pytest.raises(RenderError, match="the final assistant turn rendered to no supervised text"):
        render(text, conv, LossPolicy.last_assistant)


def test_weight_zero_turns_are_not_supervised(tokenizer):
    """axolotl's per-turn weight: 0 (ShareGPT or messages): that turn's generation block carries no loss."""
    chatml = load_template("chatml")
    conv = {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "skip me", "weight": 0},
                              {"from": "human", "value": "b"}, {"from": "gpt", "value": "train me"}]}
    assert supervised(render(chatml, conv)) == ["train me<|im_end|>"]
    whole = render(chatml, conv, LossPolicy.all)
    assert "".join(supervised(whole)) == whole.text.replace("<|im_start|>assistant\nskip me<|im_end|>\n", "")
    messages = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x", "weight": 0}]}
    with pytest.raises(RenderError, match="nothing left to supervise"):
        render(chatml, messages)


@pytest.mark.real
@pytest.mark.parametrize("name", ["smolvlm_training", "idefics3_training", "llava_next_training"])
def test_list_content_reaches_templates_that_loop_over_parts(name):
    """SmolVLM, Idefics3 and LLaVA-NeXT read content as parts: handed over as parts, they render the turns."""
    def parts(text):
        return [{"type": "text", "text": text}]

    conv = {"messages": [{"role": "user", "content": parts("What is 2+2?")}, {"role": "assistant", "content": parts("4")}]}
    out = render(trl(name), conv, LossPolicy.assistant)
    assert "What is 2+2?" in out.text and [s.strip() for s in supervised(out)][0].startswith("4")


@pytest.mark.real
@pytest.mark.parametrize("name,content,reason", [
    ("smolvlm_training", "a string", "content lost in rendering (the template printed none of it in its turn; it "
                                     "may expect content as a list of text parts)"),
    ("qwen3_training", [{"type": "text", "text": "some parts"}], "it may expect content as a string"),
    ("llama3_training", None, "tool_calls[0] (get_weather) lost in rendering (the template does not print tool calls in "
                              "the turn that makes them)"),
])
def test_a_render_that_loses_content_is_a_rejection(name, content, reason):
    """A template given content in a shape it does not read, or tool calls it does not print: never an empty turn."""
    if content is None:
        conv = {"messages": [QUESTION, CALL, RESULT, ANSWER]}
    else:
        conv = {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": content}]}
    with pytest.raises(RenderError, match=re.escape(reason)):
        render(trl(name), conv)


def test_a_list_printed_as_python_text_is_a_rejection():
    parts = [{"type": "text", "text": "hello"}]
    with pytest.raises(RenderError, match="printed the list of content parts as text"):
        render("{% for m in messages %}{{ m.content }}{% generation %}x{% endgeneration %}{% endfor %}",
               {"messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": "x"}]})


def test_builtin_chatml_reads_parts_tools_and_tool_calls():
    out = render(load_template("chatml"), {"tools": TOOLS, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, CALL, RESULT,
        {"role": "assistant", "content": "done"}]})
    assert out.text.startswith('<|im_start|>system\n# Tools\n{"type": "function"')
    assert "<|im_start|>user\nab<|im_end|>" in out.text
    assert supervised(out) == ['\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><|im_end|>',
                               "done<|im_end|>"]


def test_fields_the_template_never_reads_are_counted(tokenizer):
    """A warning, per field: the records whose tools or reasoning the template drops without a word."""
    plain = ChatTemplate("{% for m in messages %}{{ m.content }}{% if m.role == 'assistant' %}{% generation %}."
                         "{% endgeneration %}{% endif %}{% endfor %}", "plain")
    prep = Preparer(Renderer(plain, LossPolicy.assistant, bos_token=None, eos_token=None), tokenizer)
    rows = [{"tools": TOOLS, "messages": [QUESTION, ANSWER]}, {"messages": [QUESTION, ANSWER], "text": "also"},
            {"messages": [QUESTION, {"role": "assistant", "content": "x", "thinking": "t"}]}]
    prepared = prep.prepare([(0, i + 1, json.dumps(r).encode()) for i, r in enumerate(rows)])
    assert all(not isinstance(p, str) for p in prepared)
    assert prepared.warnings.ignored == {"tools": 1, "reasoning_content": 3}
    assert prepared.warnings.ambiguous == 1 and prepared.warnings.first_ambiguous == (0, 2)
    assert prepared.formats == ["messages"] * 3
    reads = Renderer(load_template("chatml"), LossPolicy.assistant, bos_token=None, eos_token=None)
    assert reads.ignored_fields(record(rows[0])) == {"reasoning_content"}  # chatml prints tools, not reasoning
