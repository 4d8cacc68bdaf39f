"""The lint gate: ``ruff check`` with the rules pyproject.toml selects (names never used or never defined, sorted
imports) passes on the package, the tests and the scripts. ruff comes with the ``dev`` extra; without it the gate
is skipped, not passed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("ruff")


def _ruff(*paths: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"),
                           *map(str, paths)], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_code_is_lint_clean():
    run = _ruff("packcli", "tests", "scripts")
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_gate_fails_on_an_unused_import_and_unsorted_imports(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import sys\nimport os\n\nprint(os.sep)\n", encoding="utf-8")
    run = _ruff(planted)
    assert run.returncode == 1
    assert "F401" in run.stdout and "I001" in run.stdout
