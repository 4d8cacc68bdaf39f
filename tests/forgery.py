"""The forgery tests' kit: run ``packcli verify`` on a forged copy and find the check that names the fault.

Consistent forgeries edit an artifact and re-seal everything a forger could recompute (shard and seam
hashes, rows, bytes, per-shard tokens, counts, records, manifest_sha256: `packcli.verify.forge`), so no
hash can tell; ``packcli verify`` must still exit 1, and the check that owns the fault must name it. The
tests live beside the check they exercise (tests/test_verify_<check module>.py).
"""

from __future__ import annotations

import itertools
import json
import mmap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

import packcli.job.scratch
import packcli.verify.suite
from packcli.cli import app
from packcli.job.scratch import Scratch
from packcli.verify.forge import read_segments
from packcli.verify.report import CheckResult

runner = CliRunner()


def caught(directory: Path, check: str, phrase: str, *extra: str) -> dict:
    """``packcli verify`` exits 1 and ``check`` reports a violation containing ``phrase``; returns the report."""
    result = runner.invoke(app, ["verify", str(directory), "--json", "--max-violations", "100", *extra])
    assert result.exit_code == 1, result.output[-2000:]
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    messages = [v["message"] for v in checks[check]["violations"]]
    assert any(phrase in m for m in messages), {n: [v["message"] for v in c["violations"]][:4]
                                                for n, c in checks.items() if not c["ok"]}
    return report


@contextmanager
def file_backed(folder: Path, block: int = 3) -> Iterator[Scratch]:
    """A `Scratch` over ``folder`` (made here) under which every column of a value or more is a file (no page-size
    floor: a small artifact's columns are files too) and every block-wise pass works ``block`` rows at a time (each
    block boundary crossed), while the context lasts."""
    folder.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mmap, "PAGESIZE", 1)
        patch.setattr(packcli.job.scratch, "BLOCK", block)
        yield Scratch(folder)


def plan_both_ways(monkeypatch: pytest.MonkeyPatch, folder: Path) -> list[Path]:
    """From now on every plan check ``verify`` runs (in this process: `caught`, `verify_artifact`) runs again over
    a `Scratch` in a folder of its own under ``folder`` (`file_backed`), and its report must be the in-memory one,
    violation for violation; returns the folders of the runs that planned (settings the planner can run on, rows):
    each must then hold the columns' files."""
    check_plan = packcli.verify.suite.check_plan
    made: list[Path] = []
    runs = itertools.count()

    def both_ways(manifest, rows, facts, result: CheckResult, _: object = None) -> None:  # noqa: ANN001 - check_plan's
        check_plan(manifest, rows, facts, result)  # in memory (the suite's own scratch maps only columns over a page)
        filed = CheckResult(result.name, limit=result.limit)
        with file_backed(folder / f"scratch-{next(runs)}") as scratch:
            check_plan(manifest, rows, facts, filed, scratch)
        assert asdict(filed) == asdict(result)
        if filed.checked:
            made.append(scratch.folder)

    monkeypatch.setattr(packcli.verify.suite, "check_plan", both_ways)
    return made


def manifest_of(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def edit_manifest(d: Path, edit) -> None:  # noqa: ANN001
    """Edit manifest fields that `reseal` would recompute, and re-seal the manifest hash alone."""
    from packcli.artifact import manifest as mf

    manifest = manifest_of(d)
    edit(manifest)
    manifest["manifest_sha256"] = mf.manifest_hash(manifest)
    mf.write_manifest(manifest, d)


def roomiest(d: Path) -> tuple[int, int, int]:
    """(shard, pack, free tokens) of the pack with the most room."""
    capacity = manifest_of(d)["config"]["capacity"]
    best = (0, 0, -1)
    for k in range(len(manifest_of(d)["shards"])):
        for r, pack in enumerate(read_segments(d, k)):
            room = capacity - sum(len(s.input_ids) for s in pack)
            if room > best[2]:
                best = (k, r, room)
    return best


REDIRECT = """configs:
- config_name: default
  data_files:
  - split: train
    path: "{path}"
{extra}"""
