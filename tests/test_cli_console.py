"""`packcli.cli.console`: results as sorted JSON on stdout; the progress bar only on a terminal, so CI logs and
``--json`` stay clean."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from packcli.cli import console
from packcli.cli.console import RichProgress, print_json


def test_json_results_are_sorted_and_anything_else_is_its_string(capsys):
    print_json({"b": 1, "a": Path("/x/y")})
    printed = capsys.readouterr()
    assert printed.out == '{\n  "a": "/x/y",\n  "b": 1\n}\n' and printed.err == ""
    assert json.loads(printed.out) == {"a": "/x/y", "b": 1}


def test_no_bar_off_a_terminal_or_when_not_asked_for(monkeypatch):
    monkeypatch.setattr(console, "err", Console(stderr=True, force_terminal=False))
    for progress in (RichProgress(enabled=True), RichProgress(enabled=False)):
        with progress.running() as running:
            running.start("units", "tokenizing", total=2)
            running.advance("units")
        assert progress._bar is None


def test_on_a_terminal_each_task_advances_its_own_bar(monkeypatch):
    monkeypatch.setattr(console, "err", Console(stderr=True, force_terminal=True))
    progress = RichProgress(enabled=True)
    with progress.running():
        progress.start("units", "tokenizing", total=4)
        progress.advance("units", 3)
        progress.advance("shards")  # never started: ignored, no error
        task = progress._bar.tasks[0]
        assert (task.description, task.total, task.completed) == ("tokenizing", 4, 3)
