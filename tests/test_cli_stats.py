"""`packcli stats` (`packcli.cli.stats`): JSON, human tables at 80 columns, worker checks, artifact mode, the plots."""

from __future__ import annotations

import json

from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.cli import app

runner = CliRunner()


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


def test_plots_of_inputs_and_artifacts_are_written(tmp_path, packed, corpus_files):
    """Both plots render (every panel), the artifact's with its packs, the inputs' with the recommendation."""
    result = runner.invoke(app, ["stats", str(packed), "--plot", str(tmp_path / "a.png")])
    assert result.exit_code == 0 and (tmp_path / "a.png").stat().st_size > 10_000
    result = runner.invoke(app, ["stats", *corpus_files, "-t", str(FIXTURES / "tokenizer"), "--plot",
                                 str(tmp_path / "i.svg")])
    assert result.exit_code == 0
    svg = (tmp_path / "i.svg").read_text()
    assert "recommended capacity" in svg or "recommended" in svg
