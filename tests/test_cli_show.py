"""`packcli show` (`packcli.cli.show`): the terminal, --json and --html, a rejected record, usage errors."""

from __future__ import annotations

import json

from conftest import cjk_row, run_cli, seam_rows


def test_cli_terminal_json_and_html(packed, tmp_path):
    row = cjk_row(packed)
    result = run_cli("show", packed, "--example", row["example_id"])
    assert result.exit_code == 0, result.output
    assert "seam-table row" in result.stdout and f"{row['source']}:{row['line']}" in result.stdout
    assert f"{row['supervised']:,} supervised" in result.stdout
    data = json.loads(run_cli("show", packed, "--example", row["example_id"], "--json").stdout)
    assert data["examples"][0]["row"] == row and data["pack"]["seams"]
    assert sum(t["supervised"] for t in data["examples"][0]["tokens"]) == row["supervised"]
    page = tmp_path / "show.html"
    result = run_cli("show", packed, "--pack", 0, "--html", page)
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and "<style>" in text
    assert "http" not in text and "src=" not in text  # self-contained: nothing fetched
    assert text.count("<span class='t s") > 0 and text.count("<span class='t u") > 0


def test_cli_a_rejected_record_and_usage_errors(packed):
    broken = next(r for r in seam_rows(packed) if r["status"] == "rejected")
    result = run_cli("show", packed, "--source", f"broken.jsonl:{broken['line']}")
    assert result.exit_code == 0 and "not in a pack (rejected" in result.stdout
    assert run_cli("show", packed).exit_code == 2
    assert run_cli("show", packed, "--source", "nope.jsonl:1").exit_code == 2
