"""`packcli pack` (`packcli.cli.pack`): bare `packcli pack` packs the bundled corpus; failures exit 1 naming the
file and line or the strategy; the summary names the template and warns; the template's date and name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT, run_cli


def test_bare_pack_packs_the_bundled_corpus(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "packcli", "pack", "--out", str(tmp_path / "p"), "--json"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["counts"]["packs"] > 0 and data["counts"]["records"] > 200
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert all("/" not in i["name"] for i in manifest["inputs"]), "the hashed manifest names files, not places"
    assert len(manifest["unhashed"]["provenance"]["inputs"]) == len(manifest["inputs"])


def test_on_error_fail_exits_1_with_file_line(tmp_path):
    result = run_cli("pack", FIXTURES / "corpus" / "broken.jsonl", "-t", FIXTURES / "tokenizer", "-o", tmp_path / "o",
                 "--on-error", "fail")
    assert result.exit_code == 1
    assert "broken.jsonl:3:" in result.stderr and not (tmp_path / "o").exists()


def test_budget_failure_exits_1_and_names_a_strategy(tmp_path, corpus_files):
    result = run_cli("pack", *corpus_files, "-t", FIXTURES / "tokenizer", "-o", tmp_path / "o", "--strategy", "sequential",
                 "--min-density", "0.999")
    assert result.exit_code == 1 and "density" in result.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["pack", "stats"])
def test_inputs_without_a_tokenizer_are_a_usage_error(command, tmp_path, monkeypatch):
    """The bundled 2,816-token tokenizer is the no-argument demo's; a user's data needs the model's."""
    monkeypatch.chdir(tmp_path)
    result = run_cli(command, FIXTURES / "corpus" / "text.jsonl")
    assert result.exit_code == 2
    assert "--tokenizer is required with input files" in result.stderr
    assert list(tmp_path.iterdir()) == []


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
    result = run_cli("pack", data, "-t", tok, "-o", tmp_path / "o")
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
    data_json = json.loads(run_cli("pack", data, "-t", tok, "-o", tmp_path / "o2", "--json").stdout)
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
            assert run_cli("pack", data, "-t", tok, "-o", out, "--template-date", day).exit_code == 0
            manifest = json.loads((out / "manifest.json").read_text())
            assert manifest["config"]["template_date"] == day
            assert manifest["template"]["origin"] == "tokenizer:chat_template.jinja"
            hashes[day, copy] = (out / "shard-00000.parquet").read_bytes()
    assert hashes["2024-07-26", 1] == hashes["2024-07-26", 2] != hashes["2025-01-02", 1] == hashes["2025-01-02", 2]
    assert run_cli("verify", tmp_path / "2025-01-02-1").exit_code == 0  # verify renders with the pinned date


def test_a_template_without_markers_stops_pack_with_the_hint(tmp_path):
    tok = _bare_tokenizer(tmp_path / "tok")
    (tok / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    result = run_cli("pack", FIXTURES / "corpus" / "openai.jsonl", "-t", tok, "-o", tmp_path / "o", "--loss", "assistant")
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
    assert run_cli("pack", data, "-t", tok, "-o", out, "--template", "tool_use").exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["template"]["name"] == "tool_use" and "# Functions" in manifest["template"]["text"]
    assert run_cli("verify", out).exit_code == 0
    (tok / "additional_chat_templates" / "tool_use.jinja").write_text(chatml)
    drifted = run_cli("verify", out, "--json")
    assert drifted.exit_code == 1 and "template changed" in drifted.stdout


@pytest.mark.real
def test_a_llama_tokenizer_without_a_template_is_refused(tmp_path):
    from conftest import real_asset

    result = run_cli("pack", FIXTURES / "corpus" / "openai.jsonl", "-t", real_asset("llama3_2"), "-o", tmp_path / "o")
    assert result.exit_code == 2 and "has no chat template, and ChatML's" in result.stderr
    assert "--template" in result.stderr and not (tmp_path / "o").exists()


def test_sharegpt_system_and_weights_pack_and_verify(tmp_path):
    data = tmp_path / "s.jsonl"
    data.write_text(json.dumps({"system": "be brief", "conversations": [
        {"from": "human", "value": "q1"}, {"from": "gpt", "value": "skipped answer", "weight": 0},
        {"from": "human", "value": "q2"}, {"from": "gpt", "value": "kept answer"}]}) + "\n")
    out = tmp_path / "o"
    assert run_cli("pack", data, "-t", FIXTURES / "tokenizer", "-o", out).exit_code == 0
    shown = json.loads(run_cli("show", out, "--source", f"{data}:1", "--json").stdout)["examples"][0]
    assert shown["text"].startswith("<|im_start|>system\nbe brief<|im_end|>")
    trained = "".join(t["text"] for t in shown["tokens"] if t["supervised"])
    assert trained == "kept answer<|im_end|>"
    assert run_cli("verify", out).exit_code == 0
