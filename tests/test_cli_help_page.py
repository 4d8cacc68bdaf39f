"""Every command's --help fits the terminal with nothing cut: rendered at 80 and 120 columns, as a user's
terminal gives them (COLUMNS), every option name, value, choice and example is there whole."""

from __future__ import annotations

import inspect
import re

import pytest
import typer.main
from typer.testing import CliRunner

from packcli.cli import app

COMMANDS = [(), ("pack",), ("verify",), ("stats",), ("show",)]


def _command(path: tuple[str, ...]):
    group = typer.main.get_command(app)
    ctx = group.make_context("packcli", [], resilient_parsing=True)
    if not path:
        return group, ctx
    command = group.get_command(ctx, path[0])
    return command, command.make_context(path[0], [], parent=ctx, resilient_parsing=True)


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "packcli")
def test_help_fits_the_width_with_nothing_cut(path, width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    page = result.stdout
    lines = page.splitlines()
    assert "…" not in page
    assert max(len(line.rstrip()) for line in lines) <= width
    assert "<bool>" not in page and "<boolean>" not in page  # a flag has no type column
    words = set(re.findall(r"[^\s│╭╮╰╯─,]+", page))
    command, ctx = _command(path)
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        for name in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
            if name.startswith("-"):
                assert name in words, f"{name} cut or missing"
        choices = re.search(r"<([^<>]*\|[^<>]*)>$", record[0])
        for choice in choices.group(1).split("|") if choices else []:
            assert choice in words or f"{choice}." in words, f"choice {choice} of {param.name} broken"
    body, _, examples = inspect.cleandoc(command.help or "").partition("Examples:")
    for example in (line.strip() for line in examples.splitlines() if line.strip()):
        assert any(line.strip() == example for line in lines), f"example wrapped: {example}"


def test_the_renderer_would_fail_the_check_on_typers_page(monkeypatch):
    """The check above is not vacuous: typer's own rich page at 80 columns cuts cells with an ellipsis."""
    from typer.core import TyperCommand

    monkeypatch.setenv("COLUMNS", "80")
    command, ctx = _command(("pack",))
    monkeypatch.setattr(type(command), "format_help", TyperCommand.format_help)
    result = CliRunner().invoke(app, ["pack", "--help"])
    assert "…" in result.stdout or "<bool>" in result.stdout
