"""Library messages name parameters (`capacity`), the CLI prints flags (--capacity): one mapping, in
packcli/cli/options.py, and no packcli flag in a message written outside packcli/cli."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import typer.main
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.cli import app
from packcli.cli.options import FLAGS, as_flags
from packcli.errors import PackcliError

PACKAGE = Path(__file__).resolve().parents[1] / "packcli"
CORPUS = str(FIXTURES / "corpus" / "text.jsonl")
TOKENIZER = str(FIXTURES / "tokenizer")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# A packcli command line a message tells the user to run (`packcli verify DIR --consumer trl`): its
# flags are the command's words, for a Python user too.
COMMAND = re.compile(r"packcli (?:pack|verify|stats|show)\b[^`\"]*")
# Text outside packcli/cli that names flags on purpose, and why it may.
ALLOWED = {
    ("artifact/manifest.py", "rebuild_command"): "builds the packcli command line that rebuilds an artifact",
    ("chat/render.py", "render"): "a record's reject reason, written into the artifact (rejects.jsonl, the seam "
                                  "table): changing it changes the bytes of every artifact with such a reject",
    ("chat/render.py", "_render_chat"): "a record's reject reason, written into the artifact",
    ("chat/render.py", "_run_minijinja"): "a record's reject reason, written into the artifact",
    ("chat/guards.py", "check_kept"): "a record's reject reason, written into the artifact",
    ("job/chunks.py", "cut_example"): "a dropped last chunk's reason, written into the seam table",
    ("chat/templates.py", "_pick_default"): "the template note, written into the manifest",
    ("job/workspace.py", "new_artifact_dir"): "the text of packcli's own marker file in a folder it makes",
    ("job/workspace.py", "_open_work"): "the text of packcli's own marker file in a folder it makes",
}
runner = CliRunner()


def cli_flags() -> set[str]:
    """Every long option of every packcli command, as click parses them."""
    group = typer.main.get_command(app)
    return {opt for command in group.commands.values() for param in command.params
            for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--")}


def flags_in_messages(path: Path, flags: set[str]) -> list[tuple[int, str | None, str]]:
    """(line, enclosing function, flag) for each packcli flag in a string of ``path`` that is not a
    docstring (docstrings document the CLI; comments are not strings) nor part of a packcli command line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found: list[tuple[int, str | None, str]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = COMMAND.sub("", node.value)
            found.extend((node.lineno, function, flag) for flag in FLAG.findall(text) if flag in flags)
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return found


def breaches(root: Path, flags: set[str]) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("cli/"):
            continue
        out += [f"{rel}:{line} ({function}): {flag}" for line, function, flag in flags_in_messages(path, flags)
                if (rel, function) not in ALLOWED]
    return out


def test_no_message_outside_the_cli_names_a_flag():
    assert breaches(PACKAGE, cli_flags()) == []


def test_the_flag_check_finds_a_planted_breach(tmp_path):
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "pack.py").write_text('raise ValueError("--capacity is the CLI\'s to say")\n')
    (tmp_path / "config.py").write_text(
        '"""Checks --capacity (a docstring may name the flag)."""\n'
        "def check(capacity):\n"
        '    """--window too."""\n'
        "    # --workers in a comment is no message\n"
        '    hint = "run `packcli verify DIR --consumer trl`"\n'
        '    raise ValueError(f"--capacity must be >= 2, got {capacity}; see --no-such-flag")\n')
    assert breaches(tmp_path, cli_flags()) == ["config.py:6 (check): --capacity"]


def test_every_flag_the_mapping_prints_is_an_option_of_a_command():
    """Every flag, and the one argument a parameter maps to (verify's ``directory``: its metavar)."""
    assert set(FLAGS.values()) - cli_flags() == {"DIRECTORY"}


@pytest.mark.parametrize(("text", "shown"), [
    ("`capacity` must be an integer from 2", "--capacity must be an integer from 2"),
    ("lower `window` or use `overlong='truncate'`", "lower --window or use --overlong truncate"),
    ("choose `input_format`; map `fields.messages`", "choose --format; map --messages-field"),
    ("`lines_per_unit` and `capacities`", "--unit-lines and --capacity"),
    ("pass `reconstruct=False`", "pass --no-reconstruct"),
    ("`template='my templates/t.jinja'`: no such file", "--template my templates/t.jinja: no such file"),
    ("see `packcli.owned` and `packcli verify --help`; `width` is no parameter",
     "see `packcli.owned` and `packcli verify --help`; `width` is no parameter"),
])
def test_as_flags_prints_the_flag_of_each_parameter(text, shown):
    assert as_flags(text) == shown


@pytest.mark.parametrize(("field", "value", "name"), [("capacity", 0, "capacity"), ("window", 0, "window"),
                                                      ("lines_per_unit", 0, "lines_per_unit")])
def test_a_library_call_names_the_parameter(tmp_path, field, value, name):
    from packcli.config import PackConfig

    with pytest.raises(PackcliError) as info:
        PackConfig(inputs=(CORPUS,), tokenizer=TOKENIZER, out=tmp_path / "o", **{field: value})
    assert f"`{name}` must be an integer" in info.value.message and "--" not in info.value.message


def test_a_library_engine_names_the_workers_parameter():
    from packcli.engine import make_engine, worker_problems

    assert worker_problems(0) == ["`workers` must be an integer from 1 to 1,024, got 0"]
    with pytest.raises(PackcliError) as info:
        make_engine("local", workers=0)
    assert "`workers`" in info.value.message and "--" not in info.value.message


@pytest.mark.parametrize(("args", "message"), [
    (["-c", "0"], "error: invalid configuration: --capacity must be an integer from 2 to 2,147,483,647, got 0"),
    (["--window", "0"], "error: invalid configuration: --window must be an integer from 1 to 2,147,483,647, got 0"),
    (["--workers", "0"], "--workers must be an integer from 1 to 1,024, got 0"),
    (["--unit-lines", "0"], "--unit-lines must be an integer from 1 to 2,147,483,647, got 0"),
    (["--ray-address", "auto"], "--ray-address and --shared-fs need --engine ray"),
])
def test_the_cli_prints_the_flag(tmp_path, args, message):
    result = runner.invoke(app, ["pack", CORPUS, "-t", TOKENIZER, "-o", str(tmp_path / "o"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "`" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_report_names_the_parameter_and_the_cli_the_flag():
    """stats' recommendation is a result a Python caller reads; `packcli stats` prints it with the flag, --json too."""
    import json

    from packcli.stats import length_stats

    reason = length_stats([CORPUS], TOKENIZER, capacities=(64,)).recommendation.reason
    assert "or `overlong='split'` (the over-long table" in reason and "--" not in reason
    printed = runner.invoke(app, ["stats", CORPUS, "-t", TOKENIZER, "-c", "64", "--json"])
    assert printed.exit_code == 0, printed.output
    shown = json.loads(printed.stdout)["recommendation"]["reason"]
    assert shown == reason.replace("`overlong='split'`", "--overlong split")


def test_flagged_maps_every_string_of_a_json_report():
    from packcli.cli.output import flagged

    violation = {"message": "without `mix`, one example per record", "line": 3}
    report = {"ok": False, "checks": [{"violations": [violation], "note": None}], "skipped": [("flex", "`device='cuda'`")]}
    shown = {"message": "without --mix, one example per record", "line": 3}
    assert flagged(report) == {"ok": False, "checks": [{"violations": [shown], "note": None}],
                               "skipped": [["flex", "--device cuda"]]}
