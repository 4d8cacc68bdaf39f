"""docs/training.md is a complete recipe: its bash and python blocks run in order, as written, on a tiny random
Qwen3 placed in a local Hugging Face cache under the name the page uses; the resumable loop, stopped after its
third step and run again, trains on every batch of both epochs once, in order; the dataset card carries the
page's two recipes word for word."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from packcli.artifact import manifest as mf
from packcli.artifact.card import CARD_FOLDER, CARD_MODEL, TORCH_RECIPE, TRL_RECIPE, recipe, render_card
from packcli.cli import app

PAGE = ROOT / "docs" / "training.md"
MODEL, ARTIFACT = "Qwen/Qwen3-0.6B", "out/"
COMMIT = "0" * 40

# Run in a child process (transformers reads the cache's location at import). The recipes are written for a
# GPU: on CPU, TRL runs two steps in float32 (TrainingArguments refuses bf16 on a CPU without use_cpu).
HARNESS = '''
import json
import trl

_init = trl.SFTConfig.__init__


def _on_cpu(self, *args, **kwargs):
    kwargs.update(use_cpu=True, bf16=False, max_steps=2)
    _init(self, *args, **kwargs)


trl.SFTConfig.__init__ = _on_cpu

from packcli.data import dataset as packcli_dataset  # noqa: E402


class Stopped(Exception):
    """The machine went down: the loop is left between two steps."""


seen, stop_after = [], [3]
_iter = packcli_dataset.PackLoader.__iter__


def _recorded(self):
    for batch in _iter(self):
        if stop_after[0] is not None and len(seen) == stop_after[0]:
            raise Stopped
        seen.append([self.dataset.epoch, batch["input_ids"][0, :16].tolist()])
        yield batch


packcli_dataset.PackLoader.__iter__ = _recorded
trl_block, torch_block = json.load(open("blocks.json"))
ns = {}
exec(compile(trl_block, "training.md (TRL)", "exec"), ns)
result = {"trl_steps": ns["trainer"].state.global_step}
try:
    exec(compile(torch_block, "training.md (PyTorch)", "exec"), {})
except Stopped:
    pass
import torch  # noqa: E402

result["first"], result["saved_step"] = list(seen), torch.load("run/checkpoint.pt", weights_only=False)["step"]
seen.clear()
stop_after[0] = None
ns = {}
exec(compile(torch_block, "training.md (PyTorch), resumed", "exec"), ns)
from packcli.data import iter_packs  # noqa: E402

packs = list(iter_packs("out/"))
result["second"], result["steps"] = seen, ns["step"]
result["expected"] = [[e, packs[int(b[0])].input_ids[:16].tolist()] for e in range(ns["epochs"])
                      for b in ns["ds"].batches(e)]
json.dump(result, open("result.json", "w"))
'''


def page_blocks() -> list[tuple[str, str]]:
    """(language, text) of every bash and python block of the page, in order; fragments (a first line
    ``# fragment``) are shapes to copy into one's own code, not programs."""
    blocks, lang, lines = [], None, []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if lang is None and line in ("```bash", "```python"):
            lang, lines = line[3:], []
        elif lang is not None and line == "```":
            if not (lines and lines[0].startswith("# fragment")):
                blocks.append((lang, "\n".join(lines) + "\n"))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def test_the_card_and_the_page_teach_the_same_recipes(packed):
    python = [text for lang, text in page_blocks() if lang == "python"]
    assert python == [recipe(TRL_RECIPE, artifact=ARTIFACT, model=MODEL),
                      recipe(TORCH_RECIPE, artifact=ARTIFACT, model=MODEL)]
    card = render_card(mf.load_manifest(packed))
    for text in (TRL_RECIPE, TORCH_RECIPE):
        assert recipe(text, artifact=CARD_FOLDER, model=CARD_MODEL) in card
    assert "DataLoader(ds" not in card and "PackLoader(ds" in card


def test_a_state_saved_after_the_epoch_would_replay_it(packed):
    """Why the recipe saves mid-epoch: after the loop, the state is the epoch's start under the same epoch."""
    pytest.importorskip("torch")
    from packcli.data import PackDataset, PackLoader

    ds = PackDataset(packed, batch_packs=2, collate=list, seed=0)
    loader = PackLoader(ds)
    first_pass = [[p.input_ids[0] for p in batch] for batch in loader]
    after = loader.state_dict()
    assert after["epoch"] == 0 and after["batches_done"] == 0
    again = PackDataset(packed, batch_packs=2, collate=list, seed=0)
    again.load_state_dict(after)
    assert [[p.input_ids[0] for p in batch] for batch in again] == first_pass  # the whole epoch, twice


def _model_cache(cache: Path) -> None:
    """The fixture tokenizer and a tiny random Qwen3 as huggingface_hub caches ``Qwen/Qwen3-0.6B``."""
    import torch
    import transformers

    repo = cache / "models--Qwen--Qwen3-0.6B"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((FIXTURES / "tokenizer" / name).read_bytes())
    torch.manual_seed(0)
    config = transformers.Qwen3Config(vocab_size=2816, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      max_position_embeddings=4096, tie_word_embeddings=True, use_cache=False)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(snapshot)


@pytest.mark.slow  # imports trl and transformers in a child process, trains two steps and a dozen: about a minute
@pytest.mark.torch
def test_the_page_runs_as_written(tmp_path, monkeypatch):
    for name in ("torch", "transformers", "trl", "datasets"):
        pytest.importorskip(name)
    _model_cache(tmp_path / "hub")
    lines = (FIXTURES / "corpus" / "openai.jsonl").read_text(encoding="utf-8").split("\n")[:40]
    (tmp_path / "chat.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "WANDB_DISABLED": "true"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    blocks = page_blocks()
    commands = [shlex.split(line) for lang, text in blocks if lang == "bash" for line in text.splitlines()
                if line.startswith("packcli ")]
    assert [c[1] for c in commands] == ["pack", "verify"]
    for command in commands:
        extra = ["-c", "1024"] if command[1] == "pack" else []  # 4096-token packs are slow on a CPU
        result = CliRunner().invoke(app, command[1:] + extra)
        assert result.exit_code == 0, result.output
    assert mf.read_manifest(tmp_path / "out")["unhashed"]["provenance"]["tokenizer"] == MODEL
    (tmp_path / "blocks.json").write_text(json.dumps([text for lang, text in blocks if lang == "python"]))
    (tmp_path / "harness.py").write_text(HARNESS)
    run = subprocess.run([sys.executable, "harness.py"], cwd=tmp_path, env=dict(os.environ, **env),
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["trl_steps"] == 2
    expected, saved = result["expected"], result["saved_step"]
    assert len(expected) > 4 and {e for e, _ in expected} == {0, 1}
    assert result["first"] == expected[:3] and saved == 2  # stopped after step 3; the checkpoint holds step 2
    assert result["second"] == expected[saved:]  # resumed at the next batch: each batch once, in order
    assert result["steps"] == len(expected)
