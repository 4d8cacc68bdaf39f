"""TRL's training templates: the one TRL's own ``get_training_chat_template`` maps a template to, used for
assistant-only loss and pinned like any template; ``--template trl:NAME``; and the refusals that say why."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, real_asset

from packcli.chat import LossPolicy, load_template, resolve_template
from packcli.chat.training import trl_templates_dir
from packcli.config import PackConfig
from packcli.contract import IGNORE_INDEX
from packcli.errors import InputError
from packcli.job.run import pack_corpus
from packcli.tokenizer.load import load_tokenizer
from packcli.verify import verify_artifact

UNMARKED = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


@pytest.fixture()
def unmarked_tokenizer(tmp_path, tokenizer_dir):
    """The fixture tokenizer with a template TRL does not know and without generation markers."""
    shutil.copy(tokenizer_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = UNMARKED
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.fixture()
def no_trl(monkeypatch):
    """trl as if it were not installed: importlib's find_spec answers None for a module set to None."""
    for name in [m for m in sys.modules if m == "trl" or m.startswith("trl.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "trl", None)


def test_trl_name_reads_the_installed_trls_training_template():
    folder = trl_templates_dir()
    if folder is None:
        pytest.skip("trl is not installed")
    template = load_template("trl:qwen3_training")
    assert template.text == (folder / "qwen3_training.jinja").read_text(encoding="utf-8")
    assert template.origin == "trl:qwen3_training" and template.has_generation_markers
    assert load_template("trl:qwen3_training.jinja").text == template.text
    with pytest.raises(InputError, match="has no training template 'qwen3'") as info:
        load_template("trl:qwen3")  # an original template, not a training one
    assert "qwen3_training" in info.value.hint and "llama3_training" in info.value.hint


def test_trl_name_without_trl_says_so(no_trl):
    with pytest.raises(InputError, match="trl:qwen3_training'`: trl is not installed") as info:
        load_template("trl:qwen3_training")
    assert "pip install trl" in info.value.hint


def test_no_trl_match_is_refused_with_the_reason_under_an_explicit_policy(unmarked_tokenizer):
    if trl_templates_dir() is None:
        pytest.skip("trl is not installed")
    tok = load_tokenizer(unmarked_tokenizer)
    with pytest.raises(InputError, match=r"has no \{% generation %\} markers.*and trl [\d.]+ has no training "
                                         r"template for it") as info:
        resolve_template("auto", tok, LossPolicy.last_assistant)
    assert "`template='trl:NAME'`" in info.value.hint and "`loss='all'`" in info.value.hint
    # --loss all needs no markers; under auto, text records still pack (a chat record would refuse)
    assert resolve_template("auto", tok, LossPolicy.all).text == UNMARKED
    assert resolve_template("auto", tok, LossPolicy.auto).text == UNMARKED


def test_without_trl_the_refusal_says_trl_is_not_installed(unmarked_tokenizer, no_trl):
    tok = load_tokenizer(unmarked_tokenizer)
    with pytest.raises(InputError, match="and trl is not installed") as info:
        resolve_template("auto", tok, LossPolicy.assistant)
    assert info.value.hint.startswith("pip install trl")


def test_under_loss_auto_a_chat_record_is_refused_with_the_trl_hint(unmarked_tokenizer, tmp_path, no_trl):
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "yo"}]}) + "\n")
    with pytest.raises(InputError, match="no \\{% generation %\\} markers") as info:
        pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(unmarked_tokenizer), out=tmp_path / "o"))
    assert "pip install trl" in info.value.hint
    assert not (tmp_path / "o").exists()


@pytest.mark.real
@pytest.mark.slow  # imports trl (torch, transformers): ~15 s on a shared 2-core machine
def test_qwen3_gets_trls_training_template_and_masks_equal_transformers(tmp_path):
    """Qwen3's own template has no markers: packcli uses the template TRL's get_training_chat_template gives
    transformers' Qwen3 tokenizer, says so, pins it, and every packed example's labels are transformers'
    assistant mask under it."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("trl")
    from trl.chat_template_utils import get_training_chat_template

    qwen3 = real_asset("qwen3")
    hf = transformers.AutoTokenizer.from_pretrained(str(qwen3))
    expected = get_training_chat_template(hf)
    assert expected is not None
    records = [json.loads(line) for line in (FIXTURES / "corpus" / "openai.jsonl").read_text().splitlines()[:24]]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out"
    summary = pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(qwen3), out=out, capacity=8192))
    manifest = summary.manifest
    assert manifest["template"]["text"] == expected and manifest["template"]["origin"] == "trl:qwen3_training"
    note = manifest["unhashed"]["template_note"]
    assert "qwen3_training.jinja" in note and "get_training_chat_template" in note
    seams = pq.read_table(out / "examples.parquet").to_pylist()
    rows = {}
    for shard in manifest["shards"]:
        for r, row in enumerate(pq.read_table(out / shard["name"]).to_pylist()):
            rows[(shard["name"], r)] = row
    assert {s["status"] for s in seams} == {"packed"}
    for seam in seams:
        row = rows[(seam["shard"], seam["row"])]
        ids = row["input_ids"][seam["offset"]:seam["offset"] + seam["length"]]
        labels = np.array(row["labels"][seam["offset"]:seam["offset"] + seam["length"]])
        oracle = hf.apply_chat_template(records[seam["line"] - 1]["messages"], chat_template=expected, tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True)
        assert ids == list(oracle["input_ids"])
        mine = (labels != IGNORE_INDEX).astype(int)
        assert mine[0] == 0 and mine[1:].tolist() == list(oracle["assistant_masks"])[1:]
    assert verify_artifact(out).ok  # drift reads trl:qwen3_training from the installed trl, and it hashes as pinned
    from packcli.stats import length_stats  # stats measures with the template pack uses

    measured = length_stats([str(data)], str(qwen3), capacities=(8192,), workers=1)
    assert sorted(measured.lengths.tolist()) == sorted(s["length"] for s in seams)
    # --loss all keeps the tokenizer's own template: nothing to mark
    all_loss = pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(qwen3), out=tmp_path / "all", loss="all",
                                      capacity=8192))
    assert all_loss.manifest["template"]["origin"] == "tokenizer:tokenizer_config.json"


@pytest.mark.real
@pytest.mark.slow  # imports trl once (torch, transformers), in this process and not in the second one
def test_trls_answer_is_remembered_so_the_next_run_does_not_import_trl(tmp_path, monkeypatch):
    """The first resolution asks TRL (importing it) and remembers its answer per trl version and template; a
    fresh process resolves Qwen3's template to the same training template without importing trl; an answer
    naming a file trl no longer ships is asked again."""
    import subprocess

    from packcli.chat import training

    pytest.importorskip("trl")
    cache = tmp_path / "packcli" / training.MAPPING_CACHE
    monkeypatch.setattr(training, "mapping_cache_path", lambda: cache)
    qwen3 = real_asset("qwen3")
    tok = load_tokenizer(qwen3)
    first = resolve_template("auto", tok, LossPolicy.assistant)
    assert first.origin == "trl:qwen3_training"
    (key, name), = json.loads(cache.read_text()).items()
    assert name == "qwen3_training" and key.endswith(load_template("auto", tok).sha256)
    code = ("import sys, json; from packcli.chat import LossPolicy, resolve_template; "
            "from packcli.tokenizer.load import load_tokenizer; "
            f"t = resolve_template('auto', load_tokenizer({str(qwen3)!r}), LossPolicy.assistant); "
            "print(json.dumps([t.origin, t.sha256, t.note, 'trl' in sys.modules, 'torch' in sys.modules]))")
    env = {**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert json.loads(out) == [first.origin, first.sha256, first.note, False, False]
    cache.write_text(json.dumps({key: "gone_training"}))
    again = resolve_template("auto", tok, LossPolicy.assistant)
    assert again.sha256 == first.sha256 and json.loads(cache.read_text()) == {key: "qwen3_training"}
