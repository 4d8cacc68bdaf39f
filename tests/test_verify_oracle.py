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
