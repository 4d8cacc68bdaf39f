"""stats: quantiles and what-if numbers against independent numpy computations; JSON; the PNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.cli import app
from packcli.stats import (
    Quantiles,
    length_stats,
    recommend,
    sweep,
    terminal_histogram,
    what_if,
)

runner = CliRunner()


def test_quantiles_match_numpy():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 5000, 1000)
    q = Quantiles.of(lengths).values
    assert q["p50"] == np.median(lengths) and q["p99.9"] == np.percentile(lengths, 99.9) and q["max"] == lengths.max()


def test_what_if_against_independent_numbers():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 3000, 2000)
    sup = lengths // 2
    cap = 2048
    fits = lengths <= cap
    pad = what_if(lengths, sup, cap, "padding")
    assert pad.packs == fits.sum()
    assert np.isclose(pad.density, lengths[fits].sum() / (fits.sum() * cap))
    assert pad.dropped_examples == (~fits).sum() and pad.dropped_supervised == sup[~fits].sum()
    bfd = what_if(lengths, sup, cap, "bfd")
    assert bfd.packs >= int(np.ceil(lengths[fits].sum() / cap))
    assert np.isclose(bfd.density, lengths[fits].sum() / (bfd.packs * cap))
    seq = what_if(lengths, sup, cap, "sequential")
    assert seq.density <= bfd.density


def test_recommendation_picks_smallest_safe_capacity():
    lengths = np.array([100] * 990 + [3000] * 10)
    cells = sweep(lengths, lengths, capacities=(1024, 4096), strategies=("bfd", "sequential", "padding"))
    rec = recommend(cells, min_density=0.5, max_displacement=1e9)
    assert rec.capacity == 4096 and rec.strategy == "bfd"


def test_length_stats_on_fixture(tokenizer_dir, corpus_files):
    stats = length_stats(corpus_files, str(tokenizer_dir), capacities=(512, 2048))
    assert stats.examples + stats.rejected == stats.records
    assert stats.total.values["max"] == stats.lengths.max()
    assert len(stats.what_if) == 2 * 5
    assert sum(terminal_histogram(stats.lengths)[i].count("#") > 0 for i in range(3)) >= 1


def test_stats_tokenizes_with_packs_backend_and_gives_the_same_lengths(tokenizer_dir, corpus_files, monkeypatch):
    """Default auto (fastokens where proven exact, guarded; tokenizers on an input too small to pay fastokens'
    load), as pack; the reference on request; same lengths."""
    pytest.importorskip("fastokens")
    from packcli.tokenizer import load

    small = length_stats(corpus_files, str(tokenizer_dir), capacities=(512,))
    assert small.tokenization["backend"] == "tokenizers"
    assert small.tokenization["reason"].startswith("auto: tokenizers, because the input (")
    monkeypatch.setattr(load, "AUTO_FAST_MIN_BYTES", 0)  # as if the fixture corpus were big
    auto = length_stats(corpus_files, str(tokenizer_dir), capacities=(512,))
    ref = length_stats(corpus_files, str(tokenizer_dir), capacities=(512,), backend="tokenizers")
    assert auto.tokenization["backend"] == "fastokens" and auto.tokenization["reason"].startswith("auto: fastokens")
    assert 0 < auto.tokenization["guard"]["checked"] <= auto.tokenization["guard"]["examples"] == auto.examples
    assert ref.tokenization["backend"] == "tokenizers" and ref.tokenization["guard"]["examples"] == 0
    assert np.array_equal(auto.lengths, ref.lengths) and auto.to_dict()["what_if"][0]["packs"] == ref.what_if[0].packs


def test_stats_in_worker_processes_equals_one_process(tokenizer_dir, corpus_files, tmp_path):
    """Units tokenized by two processes give what one process gives: lengths in input order, per-input
    counts, reject reasons and the guard's counts (summed over the units)."""
    good = Path(corpus_files[0]).read_text(encoding="utf-8").splitlines()[:20]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(good[:9] + ["{not json", '{"messages": []}'] + good[9:]) + "\n", encoding="utf-8")
    inputs = [*corpus_files, str(mixed)]
    one = length_stats(inputs, str(tokenizer_dir), capacities=(512,), workers=1)
    two = length_stats(inputs, str(tokenizer_dir), capacities=(512,), workers=2, unit_lines=7)
    assert one.rejected == 2 and len(one.by_input) == len(inputs)
    assert np.array_equal(one.lengths, two.lengths)
    first, second = one.to_dict(), two.to_dict()
    # the guard checks a sample per batch, and units of 7 records make more batches: checked, not examples, differs
    first["tokenization"]["guard"].pop("checked"), second["tokenization"]["guard"].pop("checked")
    for cell in first["what_if"] + second["what_if"]:
        cell.pop("seconds")  # how long each strategy took to pack
    assert first == second and first["tokenization"]["guard"]["examples"] in (0, one.examples)


def test_stats_guard_stops_a_fast_backend_error_naming_file_and_line(tokenizer_dir, corpus_files, monkeypatch):
    """The guard always re-checks a batch's first example: a backend that drops its last token is caught,
    and stats fails naming the record (as pack does), instead of reporting wrong lengths."""
    pytest.importorskip("fastokens")
    from packcli.tokenizer.fast.backend import FastBackend
    from packcli.tokenizer.types import Encoded, EncodedBatch, TokenizerMismatchError

    real = FastBackend.encode

    def drop_first(self, texts, spans, *, add_special_tokens):  # noqa: ANN001, ANN202
        out = list(real(self, texts, spans, add_special_tokens=add_special_tokens))
        out[0] = Encoded(out[0].input_ids[:-1], out[0].labels[:-1], out[0].offsets[:-1])
        return EncodedBatch.of(out)

    monkeypatch.setattr(FastBackend, "encode", drop_first)
    source = corpus_files[0]  # openai.jsonl: every line a good chat record
    with pytest.raises(TokenizerMismatchError) as info:  # fastokens named: auto takes tokenizers on an input this small
        length_stats([source], str(tokenizer_dir), capacities=(512,), backend="fastokens")
    assert info.value.message.startswith(f"{source}:1: fastokens and tokenizers disagree")
    assert length_stats([source], str(tokenizer_dir), capacities=(512,), backend="tokenizers").examples > 0


def test_cli_raw_json_and_plot(tmp_path, corpus_files):
    png = tmp_path / "s.png"
    result = runner.invoke(app, ["stats", *corpus_files, "-t", str(FIXTURES / "tokenizer"), "-c", "512", "-c", "2048",
                                 "--plot", str(png), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"records", "examples", "rejected", "rejected_reasons", "total", "supervised", "what_if",
            "recommendation"} <= set(data)
    assert {"p5", "p25", "p50", "p75", "p90", "p99", "p99.9", "max"} <= set(data["total"])
    assert png.stat().st_size > 20_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ref = runner.invoke(app, ["stats", *corpus_files, "-t", str(FIXTURES / "tokenizer"), "-c", "512",
                              "--tokenizer-backend", "tokenizers", "--json"])
    assert ref.exit_code == 0, ref.output
    assert json.loads(ref.stdout)["tokenization"]["backend"] == "tokenizers"
    assert json.loads(ref.stdout)["total"] == data["total"]


def test_cli_workers_checked_before_work_and_same_numbers(corpus_files, packed):
    """``stats --workers``: out of range is one line and exit 2; 2 gives one process's numbers; an artifact
    has no tokenizing to spread, so the option is refused there."""
    tok = str(FIXTURES / "tokenizer")
    bad = runner.invoke(app, ["stats", *corpus_files, "-t", tok, "--workers", "0"])
    assert bad.exit_code == 2 and "--workers must be an integer from 1" in bad.output
    one = runner.invoke(app, ["stats", *corpus_files, "-t", tok, "-c", "512", "--workers", "1", "--json"])
    two = runner.invoke(app, ["stats", *corpus_files, "-t", tok, "-c", "512", "--workers", "2", "--json"])
    assert one.exit_code == two.exit_code == 0, one.output + two.output
    assert json.loads(one.stdout)["total"] == json.loads(two.stdout)["total"]
    refused = runner.invoke(app, ["stats", str(packed), "--workers", "2"])
    assert refused.exit_code == 2 and "--workers" in refused.output


def test_cli_artifact_mode(packed, tmp_path):
    result = runner.invoke(app, ["stats", str(packed), "--json", "--plot", str(tmp_path / "a.png")])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["counts"]["packs"] == sum(s["packs"] for s in data["shards"])
    assert abs(data["metrics"]["density"] - data["counts"]["tokens"] / (data["counts"]["packs"] * 1024)) < 1e-9
    assert (tmp_path / "a.png").stat().st_size > 20_000
    human = runner.invoke(app, ["stats", str(packed)])
    assert human.exit_code == 0 and "density" in human.stdout
    backend = runner.invoke(app, ["stats", str(packed), "--tokenizer-backend", "tokenizers"])
    assert backend.exit_code == 2 and "--tokenizer-backend: for raw inputs" in backend.output


def test_human_output_never_cuts_a_number_at_80_columns(packed, corpus_files):
    raw = runner.invoke(app, ["stats", *corpus_files, "-t", str(FIXTURES / "tokenizer")], env={"COLUMNS": "80"})
    art = runner.invoke(app, ["stats", str(packed)], env={"COLUMNS": "80"})
    for result in (raw, art):
        assert result.exit_code == 0, result.output
        assert "…" not in result.stdout
        assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_a_fitted_table_leaves_out_columns_rather_than_cut_numbers():
    from rich.console import Console

    from packcli.cli.output import Col, fitted_table

    rows = [["1,234,567,890", "0.999912", "123,456,789,012"], ["7", "0.5", "9"]]
    table = fitted_table("t", [Col("tokens", keep=9), Col("density", keep=5), Col("bytes", keep=1)], rows, width=34)
    console = Console(width=34, record=True)
    console.print(table)
    text = console.export_text()
    assert "1,234,567,890" in text and "0.999912" in text and "…" not in text
    assert "123,456,789,012" not in text and "too narrow for: bytes" in text


def test_every_pack_is_in_the_fill_histogram():
    """The least-filled packs too (a pack at 0.14 among packs one token short of full), each pile resolved."""
    from packcli.plots import unused_slot_bins

    capacity = 4096
    fill = np.concatenate([np.full(300, 1.0), np.full(40, 1 - 1 / capacity), np.full(9, 1 - 30 / capacity), [0.14]])
    unused = np.rint((1 - fill) * capacity)
    counts = np.histogram(unused, unused_slot_bins(unused))[0]
    assert counts.sum() == len(fill)  # every pack, the emptiest included
    assert counts[0] == 300 and counts[1] == 40 and counts[-1] + counts[-2] >= 1  # full, one short, the 0.14 pack
    assert np.count_nonzero(counts) == 4


@pytest.mark.parametrize("tokens,label", [(3, "3"), (512, "512"), (1003, "1003"), (1024, "1k"), (1536, "1.5k"),
                                          (4096, "4k"), (32768, "32k"), (1 << 20, "1M"), (2.26, "2.3")])
def test_token_axes_read_as_tokens(tokens, label):
    from packcli.plots import token_label

    assert token_label(tokens) == label


def test_plots_of_inputs_and_artifacts_are_written(tmp_path, packed, corpus_files):
    """Both plots render (every panel), the artifact's with its packs, the inputs' with the recommendation."""
    result = runner.invoke(app, ["stats", str(packed), "--plot", str(tmp_path / "a.png")])
    assert result.exit_code == 0 and (tmp_path / "a.png").stat().st_size > 10_000
    result = runner.invoke(app, ["stats", *corpus_files, "-t", str(FIXTURES / "tokenizer"), "--plot",
                                 str(tmp_path / "i.svg")])
    assert result.exit_code == 0
    svg = (tmp_path / "i.svg").read_text()
    assert "recommended capacity" in svg or "recommended" in svg
