"""verify's bookkeeping as columns (`packcli.verify.columns`, `PackIndex` as `SegmentColumns`): the columns
read as the lists ``to_pydict`` gave, and the global check, which walks only the examples its column
checks find wanting, reports exactly what walking every row reports, on every fault of the self-test."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import faulted_copy

from packcli.artifact import manifest as mf
from packcli.artifact.seams import SEAM_TABLE_SCHEMA
from packcli.contract import SEAM_TABLE_NAME
from packcli.verify import bookkeeping, verify_artifact
from packcli.verify.columns import Hashes, Strings, _hashes, read_seam_columns
from packcli.verify.faults import FAULTS


def test_columns_read_as_the_lists_they_replace(packed: Path) -> None:
    table = pq.read_table(packed / SEAM_TABLE_NAME)
    columns, nulls = read_seam_columns(packed / SEAM_TABLE_NAME)
    expected = table.to_pydict()
    assert list(columns) == SEAM_TABLE_SCHEMA.names
    for name in SEAM_TABLE_SCHEMA.names:
        column = columns[name]
        assert list(column) == expected[name], name
        assert [column[i] for i in range(len(column))] == expected[name], name
        assert all(type(a) is type(b) for a, b in zip(column, expected[name])), name
        assert nulls[name] == table[name].null_count
    order = np.arange(columns.rows)[::-1].copy()
    moved = columns.take(order)
    for name in SEAM_TABLE_SCHEMA.names:
        assert list(moved[name]) == expected[name][::-1], name


def test_token_hash_other_than_16_hex_digits_reads_back_as_written() -> None:
    values = ["0123456789abcdef", "XYZ", None, "0123456789ABCDEF", "ffffffffffffffff", "0123456789abcdeg", ""]
    odd: dict[int, str] = {}
    hashes = Hashes(_hashes(pa.array(values, pa.string()), 0, odd), odd)
    assert list(hashes) == values
    assert hashes.exact().tolist() == [True, False, False, False, True, False, False]
    reversed_ = hashes.take(np.arange(len(values))[::-1].copy())
    assert list(reversed_) == values[::-1]


def test_strings_codes_and_nulls() -> None:
    column = Strings(np.array([1, -1, 0, 1], np.int32), ["packed", "rejected"])
    assert list(column) == ["rejected", None, "packed", "rejected"]
    assert column.isin(["rejected"]).tolist() == [True, False, False, True]
    assert column.recode(["packed", "truncated", "rejected"]).tolist() == [2, -1, 0, 2]


def _walk_every_row(engine, artifact, rows, inputs, occurrence):
    """What the global check did before its column checks: walk every row, and look for unclaimed
    segments among every id in the packs, in the order the shards first hold them."""
    ids = artifact.packs.columns.example_id
    _, first = np.unique(ids, return_index=True)
    return np.arange(rows.rows), ids[np.sort(first)]


GLOBAL_FAULTS = [f for f in FAULTS if f.check in ("global", "copies", "reconstruction", "plan")]


@pytest.mark.parametrize("kind", ["truncate", "split"])
@pytest.mark.parametrize("fault", GLOBAL_FAULTS, ids=[f.name for f in GLOBAL_FAULTS])
def test_global_reports_what_walking_every_row_reports(fault, kind: str, request: pytest.FixtureRequest,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = request.getfixturevalue("packed" if kind == "truncate" else "split_packed")
    copy = faulted_copy(artifact, fault, tmp_path)
    fast = verify_artifact(copy, reconstruct=False, max_violations=1000)
    monkeypatch.setattr(bookkeeping, "_suspects", _walk_every_row)
    slow = verify_artifact(copy, reconstruct=False, max_violations=1000)
    got, want = ({c.name: dataclasses.asdict(c) for c in report.checks} for report in (fast, slow))
    assert got == want
    if fault.check == "global":
        assert got["global"]["count"] > 0


def _copies_walked(rows: dict[str, list], inputs: int, result) -> None:
    """The copies check as it walked every record in Python before it ran on columns (without --mix): the
    oracle the column version must agree with, finding for finding."""
    from packcli.contract import IN_PACKS
    from packcli.verify.copies import USABLE, _copy_status
    from packcli.verify.report import Violation

    statuses_of: dict[tuple[int, int, int], list[str]] = {}
    records: dict[tuple[int, int], list[int]] = {}
    for i, (k, line) in enumerate(zip(rows["input"], rows["line"])):
        if not 0 <= k < inputs:
            continue
        records.setdefault((k, line), []).append(i)
        statuses_of.setdefault((k, line, rows["copy"][i]), []).append(rows["status"][i])
    keys = sorted(records)
    copies = {k: sorted({rows["copy"][i] for i in records[k]}) for k in keys}
    statuses = [[_copy_status(statuses_of[(*k, c)]) for c in copies[k]] for k in keys]
    usable = [any(s in USABLE for s in st) for st in statuses]
    for k, st, ok in zip(keys, statuses, usable):
        result.checked += 1
        want = int(ok)
        mine, got = records[k], copies[k]
        loc = {"example_id": rows["example_id"][mine[0]], "source": rows["source"][mine[0]], "line": k[1]}
        why = "without `mix`, one example per record"
        wanted = want if ok and want else 1
        if len(got) != wanted or got != list(range(wanted)):
            result.fail(Violation(f"has copies {got[:6]}, expected {list(range(min(wanted, 6)))}"
                                  f"{'...' if wanted > 6 else ''} ({why})", field="copy", **loc))
        elif ok and want and not all(s in IN_PACKS for s in st):
            result.fail(Violation(f"{why}, but the seam table says {st}", field="status", **loc))


@pytest.mark.parametrize("seed", range(12))
def test_copies_on_columns_finds_what_walking_every_record_finds(seed: int, tmp_path: Path) -> None:
    from packcli.contract import STATUSES
    from packcli.verify.copies import check_copies
    from packcli.verify.report import CheckResult

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    statuses = [*STATUSES, "bogus"]
    data = {name: np.zeros(n, np.int64).tolist() for name in SEAM_TABLE_SCHEMA.names}
    data.update(example_id=rng.integers(0, 2**62, n).tolist(), input=rng.integers(-1, 4, n).tolist(),
                line=rng.integers(0, 12, n).tolist(), copy=rng.choice([0, 0, 0, 1, 2, 5], n).tolist(),
                status=[statuses[j] for j in rng.choice(len(statuses), n, p=[.5, .1, .05, .05, .05, .15, .05, .05])],
                source=[f"in{j}" for j in rng.integers(0, 3, n)], token_hash=["0" * 16] * n,
                reason=[""] * n, shard=[None] * n, format=[None] * n)
    path = tmp_path / "seams.parquet"
    pq.write_table(pa.table(data, schema=SEAM_TABLE_SCHEMA), path)
    columns, _ = read_seam_columns(path)
    fixture = mf.load_manifest(Path(__file__).resolve().parents[1] / "fixtures" / "packed")
    inputs = tuple(mf.InputPin(f"in{j}", "jsonl", 0, "0" * 64, 0) for j in range(3))
    manifest = dataclasses.replace(fixture, inputs=inputs, config=dataclasses.replace(fixture.config, mix=None, seed=0))
    fast, slow = CheckResult("copies", limit=10_000), CheckResult("copies", limit=10_000)
    check_copies(columns, manifest, fast)
    _copies_walked(data, 3, slow)
    assert (fast.checked, fast.count, fast.violations) == (slow.checked, slow.count, slow.violations)
    assert slow.count and slow.checked > slow.count  # records of each kind: wanting and whole
