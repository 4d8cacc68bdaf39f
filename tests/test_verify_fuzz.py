"""Malformed values anywhere in a forged artifact are violations with a message, never a traceback (exit 3).

A forger controls every byte, not only the values pack would write: a weight that makes a mixture
divide by zero, a null inside a token list, a number too large for any array, a string where a count
belongs. Each grid below writes such a value into one place of a small artifact (re-sealed where a
forger would re-seal) and runs ``verify``: it must return a report that names a violation, or refuse
the artifact with a `PackcliError` (a usage error, exit 2). Any other exception is the bug.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, write_jsonl

from packcli.artifact import manifest as mf
from packcli.artifact.seams import SEAM_TABLE_SCHEMA
from packcli.artifact.shards import SCHEMA
from packcli.contract import MANIFEST_NAME, SEAM_TABLE_NAME
from packcli.errors import PackcliError
from packcli.verify import forge, verify_artifact
from packcli.verify.owners import hashed_leaves, pattern_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer_dir) -> Path:
    """Chat, text and broken records in three inputs, a repeat mixture, truncation: every manifest field there."""
    from conftest import jsonl_records

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    root = tmp_path_factory.mktemp("fuzz")
    a = write_jsonl(root / "a.jsonl", jsonl_records("openai.jsonl")[:8])
    b = write_jsonl(root / "b.jsonl", jsonl_records("text.jsonl")[:5])
    c = root / "c.jsonl"
    c.write_bytes(b"".join((FIXTURES / "corpus" / "broken.jsonl").read_bytes().splitlines(True)[:3]))
    out = root / "tiny"
    pack_corpus(PackConfig(inputs=(str(a), str(b), str(c)), tokenizer=str(tokenizer_dir), out=out, capacity=256,
                           packs_per_shard=2, mix="a.jsonl=2x,b.jsonl=0.5x", overlong="truncate",
                           max_reject_fraction=1.0))
    assert verify_artifact(out).ok
    return out


def verify_or_refuse(directory: Path) -> str:
    """'violation' or 'refused'; fails the test on any other outcome (a clean pass, or a traceback)."""
    try:
        report = verify_artifact(directory, workers=1)
    except PackcliError:
        return "refused"
    return "passed" if report.ok else "violation"


def _values(value: object) -> list[object]:
    """Values a forger may write in place of ``value``: another type, and the extremes of its own."""
    if isinstance(value, bool):
        return [not value, None]
    if isinstance(value, int):
        return [-1, 2**63, None]
    if isinstance(value, float):
        return [-1.0, math.nan, None]
    if isinstance(value, str):
        return ["", "../../outside", None]
    return ["x", -1, {"x": 5}]


def _leaves(directory: Path) -> list[tuple[str, object]]:
    """One path per pattern, and every path of the mixture (its weights and inputs are where arithmetic is)."""
    seen, out = set(), []
    for path, value in hashed_leaves(mf.read_manifest(directory)):
        if pattern_of(path) not in seen or path.startswith("config.mix"):
            seen.add(pattern_of(path))
            out.append((path, value))
    return out


def test_the_cases_the_red_team_found(tiny, tmp_path):
    """--mix weights that add up to zero (ZeroDivisionError in the draw) and a null inside input_ids (numpy)."""
    zero = tmp_path / "zero"
    shutil.copytree(tiny, zero)
    forge.reseal(zero, lambda m: m["config"]["mix"].update(
        by="proportion", sources=[dict(s, weight=0.0) for s in m["config"]["mix"]["sources"]]))
    report = verify_artifact(zero, workers=1)
    messages = [v.message for c in report.checks for v in c.violations]
    assert any("config.mix" in m and "add up to 0" in m for m in messages), messages
    null = tmp_path / "null"
    shutil.copytree(tiny, null)
    forge.rewrite_packs(null, 0, lambda rows: rows[0]["input_ids"].__setitem__(1, None), recount_rows=False)
    forge.reseal(null)
    report = verify_artifact(null, workers=1)
    messages = [v.message for c in report.checks for v in c.violations]
    assert any("null" in m and "input_ids" in m for m in messages), messages


def test_every_manifest_value_malformed(tiny, tmp_path):
    """Each hashed leaf given each malformed value, the manifest hash re-sealed: a violation or a refusal."""
    scratch = Scratch(tiny, tmp_path / "copy")
    clean = scratch.files[MANIFEST_NAME].decode()
    outcomes: dict[str, str] = {}
    crashed = []
    for path, value in _leaves(tiny):
        for bad in _values(value):
            manifest = json.loads(clean)
            forge.set_field(manifest, path, bad)
            manifest["manifest_sha256"] = mf.manifest_hash(manifest)
            mf.write_manifest(manifest, scratch.path)  # the manifest only: nothing else is touched
            try:
                outcomes[f"{path}={bad!r}"] = verify_or_refuse(scratch.path)
            except Exception as exc:  # noqa: BLE001 - the finding
                crashed.append(f"{path} = {bad!r}: {type(exc).__name__}: {exc}")
    assert not crashed, "\n".join(crashed)
    assert len(outcomes) > 200 and "violation" in outcomes.values()


class Scratch:
    """A copy of the artifact that each case edits and `reset` puts back (faster than a copy per case)."""

    def __init__(self, artifact: Path, where: Path) -> None:
        shutil.copytree(artifact, where)
        self.path, self.files = where, {p.name: p.read_bytes() for p in where.iterdir()}

    def reset(self) -> None:
        for name in {p.name for p in self.path.iterdir()} - set(self.files):
            (self.path / name).unlink()
        for name, data in self.files.items():
            (self.path / name).write_bytes(data)


SHARD_CELLS = {  # a column's value in one row, as a forger writes it (the schema stays the contract's)
    "list": [lambda v: v[:1] + [None] + v[2:], lambda v: [], lambda v: [2**31 - 1] * len(v),
             lambda v: [-(2**31)] + v[1:], lambda v: v + v],
    "int": [lambda v: 2**31 - 1, lambda v: -1],
}


def test_every_shard_cell_malformed(tiny, tmp_path):
    scratch, crashed = Scratch(tiny, tmp_path / "copy"), []
    for column in SCHEMA.names:
        kind = "list" if pa.types.is_list(SCHEMA.field(column).type) else "int"
        for j, mutate in enumerate(SHARD_CELLS[kind]):
            forge.rewrite_packs(scratch.path, 0, lambda rows: rows[0].__setitem__(column, mutate(rows[0][column])),
                                recount_rows=False)
            forge.reseal(scratch.path)
            try:
                assert verify_or_refuse(scratch.path) != "passed", f"{column} #{j} passes"
            except AssertionError:
                raise
            except Exception as exc:  # noqa: BLE001 - the finding
                crashed.append(f"{column} #{j}: {type(exc).__name__}: {exc}")
            scratch.reset()
    assert not crashed, "\n".join(crashed)


SEAM_CELLS = {pa.int64(): [-1, None], pa.int32(): [-1, 2**31 - 1, None], pa.string(): ["", "\x00", None]}


def test_every_seam_table_cell_malformed(tiny, tmp_path):
    scratch, crashed = Scratch(tiny, tmp_path / "copy"), []
    rows = pq.read_table(tiny / SEAM_TABLE_NAME).to_pylist()
    target = next(i for i, r in enumerate(rows) if r["status"] == "packed")
    for column in SEAM_TABLE_SCHEMA.names:
        for bad in SEAM_CELLS[SEAM_TABLE_SCHEMA.field(column).type]:
            forge.rewrite_seam(scratch.path, lambda rows: rows[target].__setitem__(column, bad))
            forge.reseal(scratch.path, recount_counts=bad is not None)
            try:
                verify_or_refuse(scratch.path)
            except Exception as exc:  # noqa: BLE001 - the finding
                crashed.append(f"{column} = {bad!r}: {type(exc).__name__}: {exc}")
            scratch.reset()
    assert not crashed, "\n".join(crashed)
