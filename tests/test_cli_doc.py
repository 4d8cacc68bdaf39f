"""docs/cli.md is generated from the CLI; this fails when it is stale (regenerate, review the diff)."""

from __future__ import annotations

from conftest import load_script


def test_the_command_reference_is_what_the_cli_says():
    make = load_script("make_cli_doc")
    assert make.main(["--check"]) == 0, "docs/cli.md is stale: run python scripts/make_cli_doc.py"


def test_the_check_catches_a_stale_page(tmp_path):
    make = load_script("make_cli_doc")
    page = tmp_path / "cli.md"
    page.write_text(make.render().replace("Tokens per pack.", "Tokens per row."), encoding="utf-8")
    assert make.main(["--check", "--out", str(page)]) == 1
