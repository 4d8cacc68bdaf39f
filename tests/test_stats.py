"""stats: quantiles and what-if numbers against independent numpy computations; JSON; the PNG."""

from __future__ import annotations

import json

import numpy as np
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


def test_cli_artifact_mode(packed, tmp_path):
    result = runner.invoke(app, ["stats", str(packed), "--json", "--plot", str(tmp_path / "a.png")])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["counts"]["packs"] == sum(s["packs"] for s in data["shards"])
    assert abs(data["metrics"]["density"] - data["counts"]["tokens"] / (data["counts"]["packs"] * 1024)) < 1e-9
    assert (tmp_path / "a.png").stat().st_size > 20_000
    human = runner.invoke(app, ["stats", str(packed)])
    assert human.exit_code == 0 and "density" in human.stdout
