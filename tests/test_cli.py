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
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "--template-date", "26/07/2024"],
     "--template-date must be a date as YYYY-MM-DD"),
    (["pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "--template", "tool_use"],
     "template tool_use: no such file, and not a named template of the tokenizer (the tokenizer's templates: default)"),
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
    assert all(cmd in result.stdout for cmd in ("pack", "verify", "stats", "show"))
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
    import packcli.job.run

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(packcli.job.run, "pack_corpus", broken)
    args = ("pack", FIXTURES / "corpus" / "text.jsonl", "-t", FIXTURES / "tokenizer", "-o", tmp_path / "o")
    result = run(*args)
    assert result.exit_code == 3
    lines = result.stderr.strip().split("\n")
    assert lines == ["error: internal error: ZeroDivisionError: division by zero",
                     "  hint: this is a bug in packcli, please report it; PACKCLI_DEBUG=1 shows the traceback"]
    monkeypatch.setenv("PACKCLI_DEBUG", "1")
    assert isinstance(run(*args).exception, ZeroDivisionError)  # the traceback, for the bug report


def _bare_tokenizer(directory):
    """The fixture tokenizer without a chat template of its own (ChatML's tokens still in its vocabulary)."""
    import shutil

    directory.mkdir()
    shutil.copy(FIXTURES / "tokenizer" / "tokenizer.json", directory / "tokenizer.json")
    config = json.loads((FIXTURES / "tokenizer" / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def test_summary_says_which_template_and_warns_about_ambiguous_records_and_ignored_fields(tmp_path):
    data = tmp_path / "d.jsonl"
    rows = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}],
             "text": "also here"},
            {"tools": [{"name": "f"}], "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = _bare_tokenizer(tmp_path / "tok")
    result = run("pack", data, "-t", tok, "-o", tmp_path / "o")
    assert result.exit_code == 0, result.output
    words = set(result.stdout.replace("│", " ").split())  # the summary's template row, wrapped in its table
    assert {"template", "builtin:chatml:", "built-in", "ChatML:", "template", "own"} <= words
    err = " ".join(result.stderr.split())
    assert f"1 records hold more than one of messages, conversations, prompt/completion and text, and were read by " \
           f"that precedence (first: {data}:1)" in err
    assert "fields the template never reads: reasoning_content (1 records)" in err
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["unhashed"]["template_note"] == ("packcli's built-in ChatML: the tokenizer has no chat template "
                                                     "of its own")
    assert manifest["unhashed"]["input_warnings"] == {"ambiguous_records": 1, "first_ambiguous": f"{data}:1",
                                                      "ignored_fields": {"reasoning_content": 1}, "column_types": {}}
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "o" / "examples.parquet").column("format").to_pylist() == ["messages", "messages"]
    data_json = json.loads(run("pack", data, "-t", tok, "-o", tmp_path / "o2", "--json").stdout)
    assert data_json["input_warnings"]["ambiguous_records"] == 1 and data_json["template"]["origin"] == "builtin:chatml"


def test_template_date_is_pinned_in_the_manifest_and_moves_the_bytes(tmp_path):
    tok = _bare_tokenizer(tmp_path / "tok")
    (tok / "chat_template.jinja").write_text(
        "{{ strftime_now('%d %b %Y') }}\n{% for m in messages %}{{ m.content }}{% if m.role == 'assistant' %}"
        "{% generation %}<|im_end|>{% endgeneration %}{% endif %}{% endfor %}")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}) + "\n")
    hashes = {}
    for day in ("2024-07-26", "2025-01-02"):
        for copy in (1, 2):
            out = tmp_path / f"{day}-{copy}"
            assert run("pack", data, "-t", tok, "-o", out, "--template-date", day).exit_code == 0
            manifest = json.loads((out / "manifest.json").read_text())
            assert manifest["config"]["template_date"] == day
            assert manifest["template"]["origin"] == "tokenizer:chat_template.jinja"
            hashes[day, copy] = (out / "shard-00000.parquet").read_bytes()
    assert hashes["2024-07-26", 1] == hashes["2024-07-26", 2] != hashes["2025-01-02", 1] == hashes["2025-01-02", 2]
    assert run("verify", tmp_path / "2025-01-02-1").exit_code == 0  # verify renders with the pinned date


def test_a_template_without_markers_stops_pack_with_the_hint(tmp_path):
    tok = _bare_tokenizer(tmp_path / "tok")
    (tok / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    result = run("pack", FIXTURES / "corpus" / "openai.jsonl", "-t", tok, "-o", tmp_path / "o", "--loss", "assistant")
    assert result.exit_code == 2 and "has no {% generation %} markers" in result.stderr
    assert "has no training template for it" in result.stderr and "--template trl:NAME" in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_named_template_is_used_and_verified_by_name(tmp_path):
    tok = _bare_tokenizer(tmp_path / "tok")
    chatml = (ROOT / "packcli" / "templates" / "chatml.jinja").read_text()
    (tok / "chat_template.jinja").write_text(chatml)
    (tok / "additional_chat_templates").mkdir()
    (tok / "additional_chat_templates" / "tool_use.jinja").write_text(chatml.replace("# Tools", "# Functions"))
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"tools": [{"name": "f"}], "messages": [{"role": "user", "content": "q"},
                                                                     {"role": "assistant", "content": "a"}]}) + "\n")
    out = tmp_path / "o"
    assert run("pack", data, "-t", tok, "-o", out, "--template", "tool_use").exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["template"]["name"] == "tool_use" and "# Functions" in manifest["template"]["text"]
    assert run("verify", out).exit_code == 0
    (tok / "additional_chat_templates" / "tool_use.jinja").write_text(chatml)
    drifted = run("verify", out, "--json")
    assert drifted.exit_code == 1 and "template changed" in drifted.stdout


@pytest.mark.real
def test_a_llama_tokenizer_without_a_template_is_refused(tmp_path):
    from conftest import real_asset

    result = run("pack", FIXTURES / "corpus" / "openai.jsonl", "-t", real_asset("llama3_2"), "-o", tmp_path / "o")
    assert result.exit_code == 2 and "has no chat template, and ChatML's" in result.stderr
    assert "--template" in result.stderr and not (tmp_path / "o").exists()


def test_sharegpt_system_and_weights_pack_and_verify(tmp_path):
    data = tmp_path / "s.jsonl"
    data.write_text(json.dumps({"system": "be brief", "conversations": [
        {"from": "human", "value": "q1"}, {"from": "gpt", "value": "skipped answer", "weight": 0},
        {"from": "human", "value": "q2"}, {"from": "gpt", "value": "kept answer"}]}) + "\n")
    out = tmp_path / "o"
    assert run("pack", data, "-t", FIXTURES / "tokenizer", "-o", out).exit_code == 0
    shown = json.loads(run("show", out, "--source", f"{data}:1", "--json").stdout)["examples"][0]
    assert shown["text"].startswith("<|im_start|>system\nbe brief<|im_end|>")
    trained = "".join(t["text"] for t in shown["tokens"] if t["supervised"])
    assert trained == "kept answer<|im_end|>"
    assert run("verify", out).exit_code == 0
