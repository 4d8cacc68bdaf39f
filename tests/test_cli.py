"""The CLI: exit codes, messages on stderr, --json on stdout, bare `packcli pack`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from packcli.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_bare_pack_packs_the_bundled_corpus(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "packcli", "pack", "--out", str(tmp_path / "p"), "--json"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["counts"]["packs"] > 0 and data["counts"]["records"] > 200
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert all("/" not in i["name"] for i in manifest["inputs"]), "the hashed manifest names files, not places"
    assert len(manifest["unhashed"]["provenance"]["inputs"]) == len(manifest["inputs"])


def test_pack_json_and_verify_exit_codes(tmp_path, corpus_files, tokenizer_dir):
    out = tmp_path / "o"
    result = run("pack", *corpus_files, "-t", tokenizer_dir, "-o", out, "-c", 512, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["metrics"]["density"] > 0.9
    ok = run("verify", out, "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["ok"] is True
    shard = out / "shard-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    bad = run("verify", out, "--json")
    assert bad.exit_code == 1 and json.loads(bad.stdout)["ok"] is False


@pytest.mark.parametrize("args,message", [
    (["pack", "missing.jsonl", "-t", FIXTURES / "tokenizer"], "missing.jsonl: no such file"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", "/nonexistent/tok.json"], "no such file"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "-c", "0"], "--capacity must be an integer from 2 to"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "--tokenizer-backend", "quick"],
     "'quick' is not one of"),
    (["verify", "/nonexistent-dir"], "DIRECTORY /nonexistent-dir: no such directory"),
    (["stats", "missing.jsonl", "-t", FIXTURES / "tokenizer"], "missing.jsonl: no such file"),
    (["stats", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "corpus" / "text.jsonl"], "not a valid tokenizer.json"),
])
def test_usage_errors_exit_2_with_a_message(args, message, tmp_path):
    result = run(*args, *(["-o", tmp_path / "o"] if args[0] == "pack" else []))
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_on_error_fail_exits_1_with_file_line(tmp_path):
    result = run("pack", FIXTURES / "corpus" / "broken.jsonl", "-t", FIXTURES / "tokenizer", "-o", tmp_path / "o",
                 "--on-error", "fail")
    assert result.exit_code == 1
    assert "broken.jsonl:3:" in result.stderr and not (tmp_path / "o").exists()


def test_budget_failure_exits_1_and_names_a_strategy(tmp_path, corpus_files):
    result = run("pack", *corpus_files, "-t", FIXTURES / "tokenizer", "-o", tmp_path / "o", "--strategy", "sequential",
                 "--min-density", "0.999")
    assert result.exit_code == 1 and "density" in result.stderr and not (tmp_path / "o").exists()


def test_self_test_cli(packed):
    result = run("verify", packed, "--self-test", "--json")
    assert result.exit_code == 0, result.output
    faults = json.loads(result.stdout)["faults"]
    from packcli.verify.faults import FAULTS

    assert len(faults) == 1 + len(FAULTS) and all(f["caught"] for f in faults)  # the clean copy, then each fault


def test_help_lists_commands_and_examples():
    result = run("--help")
    assert all(cmd in result.stdout for cmd in ("pack", "verify", "stats"))
    assert "Examples" in run("pack", "--help").stdout


@pytest.mark.parametrize("command", ["pack", "stats"])
def test_inputs_without_a_tokenizer_are_a_usage_error(command, tmp_path, monkeypatch):
    """The bundled 2,816-token tokenizer is the no-argument demo's; a user's data needs the model's."""
    monkeypatch.chdir(tmp_path)
    result = run(command, FIXTURES / "corpus" / "text.jsonl")
    assert result.exit_code == 2
    assert "--tokenizer is required with input files" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_error_text_is_not_read_as_markup(packed, monkeypatch):
    """rich markup would turn pip install 'packcli[torch]' into pip install 'packcli'."""
    import packcli.verify.attention as attention
    from packcli.verify.attention import TorchMissingError

    def no_torch():
        raise TorchMissingError("the attention check needs torch: pip install 'packcli[torch]'")

    monkeypatch.setattr(attention, "require_torch", no_torch)
    result = run("verify", packed, "--attention", "sdpa")
    assert result.exit_code == 2
    assert "pip install 'packcli[torch]'" in result.stderr and "[bold" not in result.stderr


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
    assert "packcli[ray]" in " ".join(run("pack", "--help").stdout.split())


def test_every_command_documents_its_exit_codes():
    readme = (ROOT / "README.md").read_text()
    assert "## Exit codes" in readme
    for command in ("pack", "verify", "stats"):
        text = " ".join(run(command, "--help").stdout.split())
        assert "Exit codes: 0 success; 1" in text and "3 an internal error" in text


def test_an_internal_error_is_exit_3_with_one_line(tmp_path, monkeypatch):
    """A bug is not a violation (exit 1) nor a usage error (exit 2): its own code, a short line, no traceback."""
    import packcli.job

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(packcli.job, "pack_corpus", broken)
    args = ("pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "-o", tmp_path / "o")
    result = run(*args)
    assert result.exit_code == 3
    lines = result.stderr.strip().split("\n")
    assert lines == ["error: internal error: ZeroDivisionError: division by zero",
                     "  hint: this is a bug in packcli, please report it; PACKCLI_DEBUG=1 shows the traceback"]
    monkeypatch.setenv("PACKCLI_DEBUG", "1")
    assert isinstance(run(*args).exception, ZeroDivisionError)  # the traceback, for the bug report
