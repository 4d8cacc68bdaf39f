"""`packcli.cli.app`: the command group, and how every command fails: exit 2 with one line for a usage error, exit
3 for a bug, text never read as markup; the help lists the commands and their exit codes."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, ROOT, run_cli

from packcli.cli import app


@pytest.mark.parametrize("args,message", [
    (["pack", "missing.jsonl", "-t", FIXTURES / "tokenizer"], "missing.jsonl: no such file"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", "/nonexistent/tok.json"], "no such file"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "-c", "0"], "--capacity must be an integer from 2 to"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "--tokenizer-backend", "quick"],
     "'quick' is not one of"),
    (["verify", "/nonexistent-dir"], "DIRECTORY /nonexistent-dir: no such directory"),
    (["stats", "missing.jsonl", "-t", FIXTURES / "tokenizer"], "missing.jsonl: no such file"),
    (["stats", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "corpus" / "text.jsonl"], "not a valid tokenizer.json"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "--template-date", "26/07/2024"],
     "--template-date must be a date as YYYY-MM-DD"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "--template", "tool_use"],
     "template tool_use: no such file, and not a named template of the tokenizer (the tokenizer's templates: default)"),
])
def test_usage_errors_exit_2_with_a_message(args, message, tmp_path):
    result = run_cli(*args, *(["-o", tmp_path / "o"] if args[0] == "pack" else []))
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_error_text_is_not_read_as_markup(packed, monkeypatch):
    """rich markup would turn pip install 'packcli[torch]' into pip install 'packcli'."""
    import packcli.verify.attention as attention
    from packcli.verify.attention import TorchMissingError

    def no_torch():
        raise TorchMissingError("the attention check needs torch: pip install 'packcli[torch]'")

    monkeypatch.setattr(attention, "require_torch", no_torch)
    result = run_cli("verify", packed, "--attention", "sdpa")
    assert result.exit_code == 2
    assert "pip install 'packcli[torch]'" in result.stderr and "[bold" not in result.stderr


def test_an_internal_error_is_exit_3_with_one_line(tmp_path, monkeypatch):
    """A bug is not a violation (exit 1) nor a usage error (exit 2): its own code, a short line, no traceback."""
    import packcli.job.run

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(packcli.job.run, "pack_corpus", broken)
    args = ("pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "-o", tmp_path / "o")
    result = run_cli(*args)
    assert result.exit_code == 3
    lines = result.stderr.strip().split("\n")
    assert lines == ["error: internal error: ZeroDivisionError: division by zero",
                     "  hint: this is a bug in packcli, please report it; PACKCLI_DEBUG=1 shows the traceback"]
    monkeypatch.setenv("PACKCLI_DEBUG", "1")
    assert isinstance(run_cli(*args).exception, ZeroDivisionError)  # the traceback, for the bug report


def test_help_lists_commands_and_examples():
    result = run_cli("--help")
    assert all(cmd in result.stdout for cmd in ("pack", "verify", "stats", "show"))
    assert "Examples" in run_cli("pack", "--help").stdout


def test_help_strings_survive_rich_markup():
    """Every help text, as typer renders it (rich markup on), keeps its brackets: a bare ``[x]`` in a
    help string is eaten as a style tag; an escaped one shows. Covers every option of every command."""
    import typer.main
    from rich.text import Text

    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        texts = [command.help or "", command.epilog or ""] + [p.help or "" for p in command.params]
        for text in texts:
            assert Text.from_markup(text).plain == text.replace("\\[", "["), (name, text)
    assert "packcli[ray]" in " ".join(run_cli("pack", "--help").stdout.split())


def test_every_command_documents_its_exit_codes():
    readme = (ROOT / "README.md").read_text()
    assert "## Exit codes" in readme
    for command in ("pack", "verify", "stats"):
        text = " ".join(run_cli(command, "--help").stdout.split())
        assert "Exit codes: 0 success; 1" in text and "3 an internal error" in text
