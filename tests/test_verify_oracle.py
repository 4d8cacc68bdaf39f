"""``verify --render-oracle transformers``: rendering checked by transformers, independent of packcli.

The negative controls plant a rendering bug in packcli (monkeypatched) before packing: plain verify
re-runs the same buggy renderer and passes, the oracle does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.cli import app
from packcli.config import PackConfig
from packcli.errors import InputError
from packcli.job.run import pack_corpus
from packcli.verify import verify_artifact

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def corpus(corpus_files) -> list[str]:
    """The whole fixture corpus: messages (content as strings and as lists of parts), ShareGPT,
    prompt/completion, text, a gzip file; broken.jsonl's rejects are not examples, so not compared."""
    return corpus_files + [str(FIXTURES / "corpus" / "broken.jsonl")]


def _pack(corpus: list[str], tokenizer_dir: Path, out: Path, **options) -> Path:
    pack_corpus(PackConfig(inputs=tuple(corpus), tokenizer=str(tokenizer_dir), out=out, capacity=1024,
                           packs_per_shard=16, **options))
    return out


@pytest.mark.parametrize("overlong", ["truncate", "drop"])
def test_the_oracle_agrees_with_a_clean_pack(overlong, corpus, tokenizer_dir, tmp_path):
    out = _pack(corpus, tokenizer_dir, tmp_path / "packed", overlong=overlong)
    report = verify_artifact(out, render_oracle="transformers")
    oracle = next(c for c in report.checks if c.name == "render_oracle")
    assert report.ok, [(c.name, [v.message for v in c.violations][:3]) for c in report.checks if not c.ok]
    statuses = json.loads((out / "manifest.json").read_text())["counts"]
    assert oracle.checked == statuses["packed"] + statuses["truncated"] + statuses["dropped"]
    assert statuses["truncated" if overlong == "truncate" else "dropped"] > 0  # the over-long path is compared too


def test_a_sample_is_seeded(corpus, tokenizer_dir, tmp_path):
    out = _pack(corpus, tokenizer_dir, tmp_path / "packed")
    first = verify_artifact(out, reconstruct=False, render_oracle="transformers", sample=10)
    again = verify_artifact(out, reconstruct=False, render_oracle="transformers", sample=10)
    assert next(c for c in first.checks if c.name == "render_oracle").checked == 10
    assert first.to_dict() == again.to_dict()


def _drop_system_messages(monkeypatch) -> None:  # noqa: ANN001
    import dataclasses

    from packcli.chat.render import Renderer

    original = Renderer._render_chat
    monkeypatch.setattr(Renderer, "_render_chat", lambda self, record, policy: original(
        self, dataclasses.replace(record, messages=tuple(m for m in record.messages if m["role"] != "system")),
        policy))


def _supervise_half_of_each_turn(monkeypatch) -> None:  # noqa: ANN001
    from packcli.chat.render import Rendered, Renderer

    original = Renderer._render_chat

    def render(self, record, policy):  # noqa: ANN001, ANN202
        out = original(self, record, policy)
        return Rendered(out.text, tuple((s, s + (e - s) // 2) for s, e in out.spans), out.add_special_tokens)
    monkeypatch.setattr(Renderer, "_render_chat", render)


@pytest.mark.parametrize(("plant", "what"), [(_drop_system_messages, "input_ids"),
                                             (_supervise_half_of_each_turn, "labels")],
                         ids=["system-prompt-dropped", "half-of-each-turn-unsupervised"])
def test_a_rendering_bug_passes_reconstruction_but_not_the_oracle(plant, what, corpus, tokenizer_dir, tmp_path,
                                                                   monkeypatch):
    plant(monkeypatch)
    out = _pack(corpus, tokenizer_dir, tmp_path / "packed")
    plain = verify_artifact(out, workers=1)
    assert plain.ok, "reconstruction re-runs the same renderer: the bug reproduces itself"
    oracle = next(c for c in verify_artifact(out, workers=1, render_oracle="transformers").checks
                  if c.name == "render_oracle")
    assert not oracle.ok
    first = oracle.violations[0]
    assert first.field == what and f"{what} differ from transformers' rendering at token" in first.message
    assert first.source.startswith(("openai.jsonl", "broken.jsonl", "sharegpt.jsonl"))  # a chat record, named
    assert first.line is not None and first.example_id is not None


def test_without_transformers_it_is_a_clear_usage_error(packed, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else
                        find_spec(name, *a))
    with pytest.raises(InputError, match="needs transformers, which is not installed"):
        verify_artifact(packed, render_oracle="transformers")
    result = CliRunner().invoke(app, ["verify", str(packed), "--render-oracle", "transformers"])
    assert result.exit_code == 2 and "not installed" in result.output


@pytest.mark.parametrize("args", [["--render-oracle", "jinja"], ["--sample", "5"],
                                  ["--render-oracle", "transformers", "--sample", "0"]])
def test_bad_oracle_options_are_usage_errors(args, packed):
    result = CliRunner().invoke(app, ["verify", str(packed), *args])
    assert result.exit_code == 2, result.output


def _drop_tool_calls(monkeypatch) -> None:  # noqa: ANN001
    import dataclasses

    from packcli.chat.render import Renderer

    original = Renderer._render_chat
    monkeypatch.setattr(Renderer, "_render_chat", lambda self, record, policy: original(
        self, dataclasses.replace(record, messages=tuple({k: v for k, v in m.items() if k != "tool_calls"}
                                                         for m in record.messages)), policy))


@pytest.mark.real
@pytest.mark.parametrize("planted", [False, True], ids=["clean", "tool-calls-dropped"])
def test_tool_calling_records_with_qwen3(planted, tmp_path, monkeypatch):
    """Qwen3's tokenizer with TRL's training template on function-calling records: transformers renders what
    packcli packed; with the tool calls dropped in packcli's renderer, only the oracle notices."""
    from chat_data import tool_conversations
    from conftest import real_asset

    data = tmp_path / "tools.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in tool_conversations(40)), encoding="utf-8")
    if planted:
        _drop_tool_calls(monkeypatch)
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(real_asset("qwen3")), out=out, capacity=4096,
                           template=str(real_asset("templates", "qwen3_training.jinja"))))
    report = verify_artifact(out, workers=1, render_oracle="transformers")
    checks = {c.name: c for c in report.checks}
    assert all(checks[name].ok for name in checks if name != "render_oracle"), report.to_dict()
    oracle = checks["render_oracle"]
    assert oracle.checked == 40 and oracle.ok is not planted, [v.message for v in oracle.violations][:3]
    if planted:
        assert "differ from transformers' rendering" in oracle.violations[0].message


# --- the oracle reads every input kind as pack does, and renders as transformers does ---


def _assets_templates() -> dict[str, Path]:
    from conftest import ASSETS

    return {p.stem: p for p in sorted((ASSETS / "templates").glob("*_training.jinja"))}


def _records(conversation_key: str = "messages") -> list[dict]:
    """Tool calls with reasoning, plain chats (content as strings and as parts), a system prompt: something every
    training template in the assets renders (what one cannot render is a reject, not compared)."""
    from chat_data import tool_conversations

    records = tool_conversations(6, string_arguments=False)
    for message in (m for r in records for m in r["messages"] if m.get("content") is None):
        message["content"] = ""
    records += [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Q{k}?"},
                              {"role": "assistant", "content": f"A{k}.", "reasoning_content": f"think {k}"}]}
                for k in range(4)]
    records += [{"messages": [{"role": "user", "content": [{"type": "text", "text": f"P{k}?"}]},
                              {"role": "assistant", "content": [{"type": "text", "text": f"R{k}."}]}]}
                for k in range(4)]
    return [{conversation_key if key == "messages" else key: value for key, value in r.items()} for r in records]


def _inputs(root: Path, records: list[dict]) -> list[str]:
    """The records as JSONL; those with string content as Parquet (one schema, as a JSON-to-Parquet conversion
    writes it: a column holds strings or lists, never both) and those with parts as a datasets.save_to_disk
    directory."""
    import datasets
    from conftest import write_jsonl, write_parquet

    def parts(r: dict) -> bool:
        return any(isinstance(m["content"], list) for m in next(v for k, v in r.items() if k != "tools"))

    write_jsonl(root / "chat.jsonl", records)
    write_parquet(root / "chat.parquet", [r for r in records[::-1] if not parts(r)])
    datasets.Dataset.from_list([r for r in records if parts(r)]).save_to_disk(str(root / "chat_ds"))
    return [str(root / "chat.jsonl"), str(root / "chat.parquet"), str(root / "chat_ds")]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_assets_templates()))
def test_every_input_kind_and_training_template_with_a_column_mapping(name, tokenizer_dir, tmp_path):
    """JSONL, Parquet (row 0 included) and a datasets directory, read through --messages-field conversation:
    transformers renders exactly what packcli packed, on every training template of the assets."""
    from packcli.ingest import FieldMap

    inputs = _inputs(tmp_path, _records("conversation"))
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=tuple(inputs), tokenizer=str(tokenizer_dir), out=out, capacity=4096,
                           template=str(_assets_templates()[name]), fields=FieldMap(messages="conversation"),
                           max_reject_fraction=1.0))
    report = verify_artifact(out, workers=1, render_oracle="transformers")
    checks = {c.name: c for c in report.checks}
    oracle = checks["render_oracle"]
    assert report.ok, [(c.name, c.skipped, [v.message for v in c.violations][:3]) for c in report.checks if not c.ok]
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert oracle.checked == counts["packed"] + counts["truncated"] + counts["dropped"] > 0
    import pyarrow.parquet as pq

    parquet = next(k for k, e in enumerate(json.loads((out / "manifest.json").read_text())["inputs"])
                   if e["kind"] == "parquet")
    assert any(r["input"] == parquet and r["line"] == 0 for r in pq.read_table(out / "examples.parquet").to_pylist())


def test_a_one_row_parquet_input_is_checked(tokenizer_dir, tmp_path):
    from conftest import write_parquet

    data = write_parquet(tmp_path / "one.parquet", [{"messages": [{"role": "user", "content": "Hi"},
                                                                  {"role": "assistant", "content": "Hello."}]}])
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(tokenizer_dir), out=out, capacity=256))
    oracle = next(c for c in verify_artifact(out, render_oracle="transformers").checks if c.name == "render_oracle")
    assert oracle.ok and oracle.checked == 1


def test_a_check_that_judged_nothing_is_not_ok(tokenizer_dir, tmp_path):
    """Every record has a per-turn weight (packcli's convention, not transformers'): nothing judged, so not ok."""
    from conftest import write_jsonl

    data = write_jsonl(tmp_path / "weights.jsonl", [{"messages": [
        {"role": "user", "content": f"Q{k}"}, {"role": "assistant", "content": "x", "weight": 0},
        {"role": "user", "content": "again"}, {"role": "assistant", "content": f"A{k}"}]} for k in range(3)])
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(tokenizer_dir), out=out, capacity=256))
    oracle = next(c for c in verify_artifact(out, render_oracle="transformers").checks if c.name == "render_oracle")
    assert not oracle.ok and oracle.checked == 0 and "no record could be judged" in oracle.skipped


@pytest.mark.real
def test_gptoss_prints_the_pinned_date_through_transformers_own_global(tmp_path):
    """gpt-oss calls strftime_now: the oracle gives it transformers' global on the pinned date (a callable
    passed as a template variable reaches the template as a string, and failed)."""
    from conftest import real_asset, write_jsonl

    data = write_jsonl(tmp_path / "chat.jsonl", _records()[6:10])
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(real_asset("llama3_2")), out=out, capacity=2048,
                           template=str(_assets_templates()["gptoss_training"]), template_date="2023-03-14"))
    oracle = next(c for c in verify_artifact(out, workers=1, render_oracle="transformers").checks
                  if c.name == "render_oracle")
    assert oracle.ok and oracle.checked == 4, [v.message for v in oracle.violations][:2]
    from transformers.utils.chat_template_utils import _compile_jinja_template

    env = _compile_jinja_template(_assets_templates()["gptoss_training"].read_text()).environment
    assert env.globals["strftime_now"]("%Y-%m-%d") != "2023-03-14"  # transformers' own global, given back


def test_last_assistant_with_two_assistant_messages_in_a_row(tokenizer_dir, tmp_path):
    """DeepSeek's training templates print consecutive assistant messages with no unmasked token between: the
    final message alone is the last turn, as packcli masks it (the oracle once merged the two mask runs)."""
    from importlib import resources

    from conftest import write_jsonl

    pytest.importorskip("trl")
    template = tmp_path / "deepseekv3_training.jinja"
    template.write_text((resources.files("trl") / "chat_templates" / "deepseekv3_training.jinja").read_text(),
                        encoding="utf-8")
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [
        {"role": "user", "content": f"Q{k}?"}, {"role": "assistant", "content": f"First part {k}."},
        {"role": "assistant", "content": f"Second part {k}."}]} for k in range(5)])
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(tokenizer_dir), out=out, capacity=1024,
                           template=str(template), loss="last-assistant"))
    report = verify_artifact(out, workers=1, render_oracle="transformers")
    oracle = next(c for c in report.checks if c.name == "render_oracle")
    assert report.ok and oracle.checked == 5, [v.message for v in oracle.violations][:2]


@pytest.mark.real
def test_empty_generation_blocks_supervise_nothing(tmp_path):
    """DiffusionGemma's tool-call turns with empty content close an empty {% generation %} block. transformers'
    mask marks the token straddling its position ('><' with Qwen3's tokenizer: template text, no character the
    assistant wrote); packcli supervises what a block holds, nothing here. The oracle compares under that rule
    (docs/chat-data.md), so the difference is named, tested, and no false alarm."""
    from chat_data import tool_conversations
    from conftest import real_asset, write_jsonl
    from transformers import AutoTokenizer
    from transformers.utils.chat_template_utils import render_jinja_template

    text = _assets_templates()["diffusion_gemma_training"].read_text()
    records = tool_conversations(8, string_arguments=False)
    for message in (m for r in records for m in r["messages"] if m.get("content") is None):
        message["content"] = ""
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=(str(write_jsonl(tmp_path / "tools.jsonl", records)),),
                           tokenizer=str(real_asset("qwen3")), out=out, capacity=8192, template=str(
                               _assets_templates()["diffusion_gemma_training"]), loss="assistant"))
    report = verify_artifact(out, workers=1, render_oracle="transformers")
    assert report.ok, [(c.name, [v.message for v in c.violations][:2]) for c in report.checks if not c.ok]
    hf = AutoTokenizer.from_pretrained(str(real_asset("qwen3")))
    straddling = []
    for record in records:
        mask = hf.apply_chat_template(record["messages"], tools=record["tools"], chat_template=text, tokenize=True,
                                      return_dict=True, return_assistant_tokens_mask=True)["assistant_masks"]
        rendered, blocks = render_jinja_template(conversations=[record["messages"]], tools=record["tools"],
                                                 chat_template=text, return_assistant_tokens_mask=True,
                                                 **hf.special_tokens_map)
        offsets = hf(rendered[0], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        for start, end in blocks[0]:
            straddling += [rendered[0][a:b] for t, (a, b) in enumerate(offsets)
                           if start == end and a < start < b and mask[t]]
    assert straddling and set(straddling) == {"><"}  # what transformers alone would train on


def test_a_transformers_without_the_oracles_functions_is_refused_before_any_work(monkeypatch):
    """The oracle renders through a private function of transformers; a release without it is a usage
    error naming it, not an internal error in the middle of the check."""
    from transformers.utils import chat_template_utils

    from packcli.errors import InputError
    from packcli.verify.oracle import require_oracle

    require_oracle("transformers")  # the installed transformers has both
    monkeypatch.delattr(chat_template_utils, "_compile_jinja_template")
    with pytest.raises(InputError, match="renders through _compile_jinja_template of transformers.utils"):
        require_oracle("transformers")
