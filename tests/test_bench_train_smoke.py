"""Smoke tests for scripts/bench_train.py --quick (fixture tokenizer, needs torch) and for the packcli
half of scripts/bench_vs_trl.py (real Qwen3 assets): each runs end to end on a few dozen conversations
and writes the JSON the docs are built from. No timing assertions: numbers from a loaded CI machine
mean nothing."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, load_script


@pytest.mark.torch
def test_quick_run_writes_the_documented_json(tmp_path, capsys):
    pytest.importorskip("torch")
    corpus = tmp_path / "small.jsonl"
    load_script("make_bench_corpus").write_bench(corpus, 40)
    bench = load_script("bench_train")
    out = tmp_path / "train.json"
    assert bench.main(["--quick", "--input", str(corpus), "-t", str(FIXTURES / "tokenizer"), "--workdir",
                       str(tmp_path / "work"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("|"), "the table must be printed last"

    data = json.loads(out.read_text())
    assert {"config", "corpus", "pack", "results", "records", "verdict", "verdict_text", "environment"} <= set(data)
    assert {"command", "wall_s", "cpu_s", "peak_rss_mib", "stage_seconds", "counts", "density"} <= set(data["pack"])
    by_name = {r["variant"]: r for r in data["results"]}
    assert {"padded-max", "padded-fixed", "packed-sdpa", "packed-flex"} == set(by_name)
    trained = ["padded-max", "padded-fixed", "packed-sdpa"]
    for name in trained:
        r = by_name[name]
        for key in ("steps", "supervised_tokens", "real_tokens", "slots", "compute_s", "collate_s", "supervised_tok_s",
                    "real_tok_s", "supervised_tok_cpu_s", "step_supervised_tok_s", "collate_share", "density",
                    "attn_density", "peak_memory_mib", "mean_loss"):
            assert key in r, (name, key)
        assert set(r["step_supervised_tok_s"]) == {"median", "p10", "p90"}
        assert len(data["records"][name]) == r["steps"]
    # The same examples on both sides: every trained variant saw exactly the same supervised tokens.
    assert len({by_name[n]["supervised_tokens"] for n in trained}) == 1
    assert by_name["packed-sdpa"]["supervised_tokens"] == data["pack"]["counts"]["supervised_tokens"]
    assert by_name["packed-sdpa"]["density"] == 1.0  # varlen: no padding slots at all
    assert by_name["padded-fixed"]["density"] <= by_name["padded-max"]["density"] < 1.0
    # flex has no CPU backward in torch 2.13: reported as skipped with the reason, never substituted.
    flex = by_name["packed-flex"]
    assert "skipped" in flex or "supervised_tok_s" in flex
    for key in ("packed-sdpa_vs_padded-max", "packed-sdpa_vs_padded-fixed"):
        assert {"speedup", "density_ratio", "of_density_ratio", "train_s_saved"} <= set(data["verdict"][key])


@pytest.mark.real
def test_vs_trl_packcli_side_writes_the_documented_json(tmp_path, capsys):
    """The pipeline comparison's packcli half (TRL lives in its own venv and is not a dependency)."""
    from conftest import real_asset

    tokenizer, template = real_asset("qwen3"), real_asset("templates", "qwen3_training.jinja")
    corpus = tmp_path / "small.jsonl"
    load_script("make_bench_corpus").write_bench(corpus, 40)
    bench = load_script("bench_vs_trl")
    out = tmp_path / "vs_trl.json"
    assert bench.main(["--corpus", str(corpus), "-t", str(tokenizer), "--template", str(template), "--skip-trl",
                       "--packcli-backend", "tokenizers", "--packcli-backend", "fastokens",
                       "--workdir", str(tmp_path / "work"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("|")
    hf, fast = json.loads(out.read_text())["results"]  # (auto picks tokenizers for an input this small)
    for row in (hf, fast):
        for key in ("wall_s", "cpu_s", "peak_rss_mib", "tokens", "supervised_tokens", "packs", "density",
                    "stage_seconds", "bytes", "command", "manifest_sha256"):
            assert key in row, key
        assert row["records"] == 40 and row["peak_rss_mib"] > 0
    assert (hf["side"], fast["side"]) == ("packcli (bfd, tokenizers)", "packcli (bfd, fastokens)")
    assert hf["manifest_sha256"] == fast["manifest_sha256"], "the backend must not change the artifact"
