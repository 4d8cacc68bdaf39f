"""Smoke test for scripts/bench_pipeline.py: every mode runs on a tiny corpus and writes the JSON
the docs are built from. No timing assertions: numbers from a loaded CI machine mean nothing."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_pipeline")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "small.jsonl"
    load_script("make_bench_corpus").write_bench(path, 60)
    return path


def _run(bench, capsys, args: list[str], out) -> dict:
    assert bench.main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.rstrip()
    assert printed.splitlines()[-1].startswith("|"), "the table must be printed last"
    return json.loads(out.read_text())


def test_tokenize_mode(bench, corpus, tmp_path, capsys):
    data = _run(bench, capsys, ["tokenize", "--corpus", str(corpus), "--n", "50", "--setup", "fixture"],
                tmp_path / "tok.json")
    assert data["mode"] == "tokenize"
    (result,) = data["results"]
    for key in ("setup", "conversations", "tokens", "prepare_wall_s", "parse_render_s", "tokenize_mask_s",
                "raw_wall_s", "prepare_tokens_per_s", "raw_tokens_per_s", "ratio", "ratio_cpu", "runs"):
        assert key in result, key
    assert result["conversations"] == 50 and result["tokens"] > 0
    assert {"git_head", "cpus", "loadavg_start", "loadavg_end"} <= set(data["environment"])


def test_pack_then_verify_modes(bench, corpus, tmp_path, capsys):
    """One corpus, not two sizes: each size costs two fresh interpreters (pack and ceiling)."""
    pack_json = tmp_path / "pack.json"
    data = _run(bench, capsys, ["pack", "--corpus", str(corpus), "--tokenizer", str(FIXTURES / "tokenizer"),
                                "--workdir", str(tmp_path / "packs"), "--backend", "tokenizers", "--backend", "auto"], pack_json)
    assert data["mode"] == "pack" and [r["backend"] for r in data["results"]] == ["tokenizers", "auto"]
    # auto on a corpus under packcli.tokenizer.load.AUTO_FAST_MIN_BYTES: tokenizers, saying why
    assert [r["pack"]["tokenization"]["backend"] for r in data["results"]] == ["tokenizers", "tokenizers"]
    assert data["results"][1]["pack"]["tokenization"]["reason"].startswith("auto: tokenizers, because the input")
    for result in data["results"]:
        for key in ("records", "tokens_tokenized", "pack_wall_s", "pack_tokens_per_s", "raw_tokens_per_s", "ratio"):
            assert key in result, key
        assert set(result["pack"]["stage_seconds"]) == {"tokenize_wall_s", "read_render_s", "tokenize_s", "pack_s", "write_s"}
        for key in ("peak_rss_mib", "density", "counts", "process_maxrss_mib"):
            assert key in result["pack"], key
        assert result["ceiling"]["tokens"] == result["tokens_tokenized"]
    assert data["results"][0]["records"] == 60

    data = _run(bench, capsys, ["verify", "--artifact", str(tmp_path / "packs" / "small-tokenizers"), "--pack-json",
                                str(pack_json), "--workers", "2", "--ceiling", str(corpus),
                                str(FIXTURES / "tokenizer"), "chatml"], tmp_path / "verify.json")
    assert data["mode"] == "verify" and data["result"]["ok"] and data["workers"] == 2
    assert data["ceiling"]["tokens"] > 0 and data["verify_over_ceiling"] > 0
    assert set(data["verify_over_pack"]) == {"tokenizers", "auto"} and data["verify_wall_s"] > 0
    assert [c["name"] for c in data["result"]["checks"]] == list(bench.CHECKS)  # every check, in verify's order
    assert set(data["result"]["check_seconds"]) == set(bench.TIMED)


def test_bench_corpus_nfc_option_normalizes_every_message(tmp_path):
    import unicodedata

    make = load_script("make_bench_corpus")
    plain, nfc = tmp_path / "plain.jsonl", tmp_path / "nfc.jsonl"
    make.write_bench(plain, 300)
    make.write_bench(nfc, 300, nfc=True)

    def contents(path):
        return [m["content"] for line in path.read_text(encoding="utf-8").split("\n") if line
                for m in json.loads(line)["messages"]]
    assert not all(unicodedata.is_normalized("NFC", c) for c in contents(plain))  # the default has decomposed text
    assert all(unicodedata.is_normalized("NFC", c) for c in contents(nfc))
    assert [unicodedata.normalize("NFC", c) for c in contents(plain)] == contents(nfc)  # the same conversations


@pytest.mark.parametrize("procs", [1, 2])
def test_tokenizer_bench_splits_batches_between_workers_and_proves_the_outputs_equal(corpus, tmp_path, procs):
    """scripts/bench_tokenizers.py: with one worker or two sharing the batches, both backends encode
    every example, and the output hash over all batches is the same (here and across the two modes)."""
    pytest.importorskip("fastokens")
    bench = load_script("bench_tokenizers")
    out = tmp_path / "tok.json"
    assert bench.main(["--corpus", str(corpus), "--n", "60", "--setup", "fixture", "--batch", "7",
                       "--procs", str(procs), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    hf, fast = data["rows"]
    assert data["procs"] == procs and hf["procs"] == procs and fast["guard_examples"] == fast["examples"] == 60
    assert hf["tokens"] == fast["tokens"] > 0 and hf["output_blake2b"] == fast["output_blake2b"]
    assert len(hf["runs"]) == len(fast["runs"]) == 1
    if procs == 2:  # the same hash as one worker's: batches in order, whoever encoded them
        one = tmp_path / "one.json"
        assert bench.main(["--corpus", str(corpus), "--n", "60", "--setup", "fixture", "--batch", "7",
                           "--backend", "fastokens", "--out", str(one)]) == 0
        assert json.loads(one.read_text())["rows"][0]["output_blake2b"] == fast["output_blake2b"]


def test_tokenizer_bench_repeats_report_the_median_run_and_refuse_outputs_that_differ():
    bench = load_script("bench_tokenizers")
    runs = [{"setup": "s", "backend": "fastokens", "tokenize_s": t, "tokenize_cpu_s": 2 * t, "output_blake2b": "h"}
            for t in (3.0, 1.0, 2.0, 9.0)]
    row = bench.median_run(runs[:3])
    assert row["tokenize_s"] == 2.0 and [r["tokenize_s"] for r in row["runs"]] == [3.0, 1.0, 2.0]
    assert bench.median_run(runs)["tokenize_s"] == 2.0  # the lower middle of an even count
    runs[1]["output_blake2b"] = "other"
    with pytest.raises(SystemExit, match="different outputs on repeated runs"):
        bench.median_run(runs)


def test_scaling_check_writes_the_curve_and_checks_the_bytes(corpus, tmp_path, capsys):
    """scripts/scaling_check.py (what scaling_check.sh runs): one row per worker count, all with the same manifest."""
    scaling = load_script("scaling_check")
    out = tmp_path / "scaling.json"
    assert scaling.main(["--workers", "1,2", "--corpus", str(corpus), "-t", str(FIXTURES / "tokenizer"), "--template",
                         "chatml", "--unit-lines", "20", "--workdir", str(tmp_path / "w"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("|"), "the table must be printed last"
    data = json.loads(out.read_text())
    assert [r["workers"] for r in data["rows"]] == [1, 2] and data["identical"] and data["rows"][0]["units"] == 3
    assert data["rows"][0]["speedup"] == 1.0 and {"usable_cpus", "git_head"} <= set(data["environment"])
    with pytest.raises(SystemExit):
        scaling.main(["--workers", "2,1", "--corpus", str(corpus)])  # not increasing: a usage error


def test_startup_bench_times_help_verify_and_small_packs(tmp_path, capsys):
    """scripts/bench_startup.py: one row per command (median of repeats) and the fixed cost step by step."""
    startup = load_script("bench_startup")
    out = tmp_path / "startup.json"
    assert startup.main(["--corpus", str(FIXTURES / "corpus" / "openai.jsonl"), "-t", str(FIXTURES / "tokenizer"),
                         "--template", "chatml", "--repeat", "1", "--out", str(out)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("|"), "the table must be printed last"
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 4 and all(r["wall_s"] > 0 for r in data["rows"].values())
    assert "load and compile the template" in data["fixed_cost_steps_s"]


def test_plan_check_bench_measures_both_modes_and_checks_the_reports_agree(tmp_path, capsys):
    """scripts/bench_plan_check.py: the plan check on an artifact in memory and file-backed, each in fresh processes
    (sampled and traced): one row per mode, the same report (the fixture's columns are under a page each, so even
    file-backed they stay in memory: tests/test_verify_replan.py shows the files)."""
    bench = load_script("bench_plan_check")
    out = tmp_path / "plan.json"
    assert bench.main([str(FIXTURES / "packed"), "--scratch-dir", str(tmp_path / "s"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("|"), "the table must be printed last"
    runs = json.loads(out.read_text())["runs"]
    assert [r["mode"] for r in runs] == ["memory", "file-backed"] and all(r["rows"] == 300 for r in runs)
    assert runs[0]["report_sha256"] == runs[1]["report_sha256"] and runs[0]["violations"] == 0
    assert runs[0]["files_mib"] == 0 and all(r["traced_mib"] > 0 and r["wall_s"] > 0 for r in runs)
