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
def corpus(tmp_path_factory) -> list[str]:
    """The fixture corpus without list-of-parts content: the fixture template concatenates content as a
    string, so transformers, handing it the list as the record has it, cannot render those records."""
    folder = tmp_path_factory.mktemp("oracle-corpus")
    lines = (FIXTURES / "corpus" / "openai.jsonl").read_bytes().split(b"\n")
    plain = [line for line in lines if line and not any(isinstance(m["content"], list)
                                                         for m in json.loads(line)["messages"])]
    (folder / "openai_plain.jsonl").write_bytes(b"\n".join(plain) + b"\n")
    return [str(folder / "openai_plain.jsonl")] + [str(FIXTURES / "corpus" / name) for name in
                                                   ("sharegpt.jsonl", "prompt_completion.jsonl", "text.jsonl")]


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
    from packcli.chat.render import Renderer

    original = Renderer._render_chat
    monkeypatch.setattr(Renderer, "_render_chat", lambda self, messages, policy: original(
        self, [m for m in messages if m.role != "system"], policy))


def _supervise_half_of_each_turn(monkeypatch) -> None:  # noqa: ANN001
    from packcli.chat.render import Rendered, Renderer

    original = Renderer._render_chat

    def render(self, messages, policy):  # noqa: ANN001, ANN202
        out = original(self, messages, policy)
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
    assert first.source == "openai_plain.jsonl" and first.line is not None and first.example_id is not None


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
