"""verify's global bookkeeping and copies judged a partition at a time (`packcli.verify.spread`; here one after the
other, or on an engine's workers): they find exactly what one judgement of the whole table finds (on forged seam
tables and packs, mixed or not, and on every self-test fault, the reports byte for byte), on Ray as locally, and
the driver receives from its workers what the suspects take, not what the examples take."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import pytest
from conftest import faulted_copy, load_script
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.artifact.manifest import Manifest
from packcli.artifact.shards import read_shard
from packcli.contract import STATUSES
from packcli.engine.local import LocalEngine
from packcli.job.units import occurrences
from packcli.job.write import count_examples, overlong_losses
from packcli.verify import bookkeeping, copies, spread, verify_artifact
from packcli.verify.faults import FAULTS, prepare_workspace
from packcli.verify.integrity import check_integrity
from packcli.verify.packs import SegmentColumns
from packcli.verify.report import CheckResult, VerifyReport

SPREAD_FAULTS = [f for f in FAULTS if f.check in ("global", "copies", "integrity", "pack_layout")]


@pytest.fixture()
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partitions of a few rows (and of a few lines): the fixture artifacts span many of them."""
    monkeypatch.setattr(bookkeeping, "PART_ROWS", 7)
    monkeypatch.setattr(copies, "PART_LINES", 3)


@contextmanager
def whole_table() -> Iterator[None]:
    """One partition holding every row (and line): the whole table judged at once, the reference."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bookkeeping, "PART_ROWS", 1 << 40)
        patch.setattr(copies, "PART_LINES", 1 << 40)
        yield


def _read(directory: Path):
    """The artifact as integrity hands it to the global check, and its manifest."""
    manifest = Manifest.of(json.loads((directory / "manifest.json").read_text()))
    report = VerifyReport(str(directory))
    artifact = check_integrity(directory, manifest, report.check("integrity"), report.check("pack_layout"))
    return artifact, manifest


def _forge(artifact, rng: np.random.Generator) -> None:
    """A few random edits of the kinds a forger makes, to the columns in memory: ids swapped or copied, keys
    repeated, places moved, digests and supervised counts changed, statuses changed, segments renamed."""
    rows, segs = artifact.seam, artifact.packs.columns
    ids, line, copy = rows["example_id"].values, rows["line"].values, rows["copy"].values
    offset, supervised = rows["offset"].values, rows["supervised"].values
    n, m = len(ids), len(segs.example_id)
    seg_ids = segs.example_id.copy()
    for _ in range(int(rng.integers(1, 5))):
        i, j = (int(x) for x in rng.integers(0, n, size=2))
        edit = int(rng.integers(0, 8))
        if edit == 0:
            ids[i], ids[j] = ids[j], ids[i]
        elif edit == 1:
            ids[i] = ids[j]
        elif edit == 2:
            line[i], copy[i] = line[j], copy[j]
        elif edit == 3:
            offset[i] += 1
        elif edit == 4:
            rows["token_hash"].values[i] ^= np.uint64(1)
        elif edit == 5:
            supervised[i] += 1
        elif edit == 6:
            rows["status"].codes[i] = rows["status"].names.index(rows["status"][j])
        else:
            seg_ids[int(rng.integers(0, m))] = seg_ids[int(rng.integers(0, m))]
    order = np.argsort(seg_ids, kind="stable")
    fields = {name: getattr(segs, name) for name in ("shard", "row", "offset", "length", "supervised", "ids_hash",
                                                     "labels_hash")}
    artifact.packs._columns = SegmentColumns(seg_ids, **fields, order=order, sorted_ids=seg_ids[order])


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("kind", ["truncate", "split"])
def test_spread_judgement_is_the_one_process_judgement(seed: int, kind: str, request: pytest.FixtureRequest,
                                                       small_parts: None) -> None:
    artifact, manifest = _read(request.getfixturevalue("packed" if kind == "truncate" else "split_packed"))
    if seed:  # seed 0: the artifact as packed
        _forge(artifact, np.random.default_rng(seed))
    inputs = manifest.inputs
    occurrence = occurrences([entry.sha256 for entry in inputs])
    with whole_table():
        want = bookkeeping._suspects(None, artifact, artifact.seam, inputs, occurrence)
    for engine in (None, LocalEngine(1)):  # in parts here, one after the other, and on an engine's workers
        got = bookkeeping._suspects(engine, artifact, artifact.seam, inputs, occurrence)
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == want[1].tolist()
    assert bool(seed) == bool(len(want[0]))  # a forged table has suspects to find, the packed one none


@pytest.mark.parametrize("kind", ["truncate", "split"])
@pytest.mark.parametrize("fault", SPREAD_FAULTS, ids=[f.name for f in SPREAD_FAULTS])
def test_spread_reports_what_one_process_reports(fault, kind: str, request: pytest.FixtureRequest, tmp_path: Path,
                                                  small_parts: None) -> None:
    artifact = request.getfixturevalue("packed" if kind == "truncate" else "split_packed")
    copy = faulted_copy(artifact, fault, tmp_path)
    with whole_table():
        here = verify_artifact(copy, reconstruct=False, max_violations=1000)
    for engine in (None, LocalEngine(1)):
        spread = verify_artifact(copy, reconstruct=False, max_violations=1000, engine=engine)
        assert json.dumps(spread.to_dict()) == json.dumps(here.to_dict())
    assert not here.ok


@pytest.fixture(scope="module")
def mixed(corpus_files, tokenizer_dir, tmp_path_factory) -> Path:
    """sharegpt.jsonl at half its records (some unsampled), text.jsonl twice over."""
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = tmp_path_factory.mktemp("mixed") / "out"
    files = [f for f in corpus_files if f.endswith(("sharegpt.jsonl", "text.jsonl"))]
    pack_corpus(PackConfig(inputs=tuple(files), tokenizer=str(tokenizer_dir), out=out, capacity=1024,
                           packs_per_shard=16, mix="sharegpt.jsonl=0.5x,text.jsonl=2x"))
    return out


def _forge_copies(rows, rng: np.random.Generator) -> None:
    """Random edits to what the copies check reads: copies renumbered, statuses changed, lines and inputs moved
    (some far away);
    one row always made copy 3 (no record here has four copies: a finding)."""
    n = rows.rows
    rows["copy"].values[int(rng.integers(0, n))] = 3
    for _ in range(int(rng.integers(0, 5))):
        i, j = (int(x) for x in rng.integers(0, n, size=2))
        edit = int(rng.integers(0, 5))
        if edit == 0:
            rows["copy"].values[i] = int(rng.integers(0, 4))
        elif edit == 4:
            rows["line"].values[i] = (-1) ** i * (2**31 - 1)  # far from every other line: a part of its own
        elif edit == 1:
            rows["status"].codes[i] = rows["status"].codes[j]
        elif edit == 2:
            rows["line"].values[i] = rows["line"].values[j]
        else:
            rows["input"].values[i] = int(rng.integers(-1, 3))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("kind", ["truncate", "split", "mixed"])
def test_spread_copies_are_the_one_process_copies(seed: int, kind: str, request: pytest.FixtureRequest,
                                                  small_parts: None) -> None:
    fixture = {"truncate": "packed", "split": "split_packed", "mixed": "mixed"}[kind]
    artifact, manifest = _read(request.getfixturevalue(fixture))
    if seed:
        _forge_copies(artifact.seam, np.random.default_rng(seed))
    here = CheckResult("copies", limit=10_000)
    with whole_table():
        copies.check_copies(artifact.seam, manifest, here)
    for engine in (None, LocalEngine(1)):
        spread = CheckResult("copies", limit=10_000)
        copies.check_copies(artifact.seam, manifest, spread, engine=engine)
        assert json.dumps(spread.__dict__, default=repr) == json.dumps(here.__dict__, default=repr)
    assert here.checked > 0 and (seed == 0) is (here.count == 0)


def test_spread_copies_refuse_a_mixture_with_an_empty_source_as_one_process_does(mixed, small_parts: None) -> None:
    artifact, manifest = _read(mixed)
    sharegpt = next(k for k, entry in enumerate(manifest.inputs) if entry.name.endswith("sharegpt.jsonl"))
    status = artifact.seam["status"]
    rejected = status.names.index("rejected") if "rejected" in status.names else len(status.names)
    if rejected == len(status.names):
        status.names.append("rejected")
    status.codes[artifact.seam["input"].values == sharegpt] = rejected
    manifest.config.mix["by"] = "proportion"  # a share of the examples asked of a source with no usable record
    here = CheckResult("copies")
    with whole_table():
        copies.check_copies(artifact.seam, manifest, here)
    assert "cannot be drawn on these records" in here.violations[0].message
    for engine in (None, LocalEngine(1)):
        spread = CheckResult("copies")
        copies.check_copies(artifact.seam, manifest, spread, engine=engine)
        assert spread.__dict__ == here.__dict__


def _random_table(rng: np.random.Generator) -> dict:
    """Seam-table columns as a forger could leave them: any status (one no status), examples split into chunks
    whose spans overlap, straddling a part, some spans starting before zero or longer than the example, lengths
    below zero, inputs out of range, rows before the first chunk 0, values near the int64 edge."""
    n = int(rng.integers(0, 60))
    chunk = np.zeros(n, np.int32)
    start = np.zeros(n, np.int64)
    k = 0
    while k < n:  # an example: its chunks in order, overlapping by a few tokens
        size = int(rng.integers(1, 5))
        chunk[k:k + size] = np.arange(min(size, n - k))
        start[k:k + size] = np.arange(min(size, n - k)) * int(rng.integers(1, 40))
        k += size
    if n and rng.random() < 0.3:
        chunk[0] = 1  # a row before any chunk 0
    for _ in range(int(rng.integers(0, 4))):  # forged: reaching back, far, or wrapping
        if n:
            start[int(rng.integers(0, n))] = int(rng.choice([-10_000, -3, 2**40, -(2**40)]))
    length = rng.integers(-2, 60, size=n)
    return {"status": [str(rng.choice([*STATUSES, "bogus"])) for _ in range(n)], "length": length,
            "supervised": rng.integers(0, 60, size=n), "original_length": length + rng.integers(0, 90, size=n),
            "chunk": chunk, "chunk_start": start, "supervised_lost": rng.integers(0, 9, size=n),
            "input": rng.integers(-1, 4, size=n)}


def _whole_table_counts(rows: dict, num_inputs: int) -> dict:
    """``counts`` as pack's own functions give them over the whole table at once."""
    status = np.array([STATUSES.index(s) if s in STATUSES else -1 for s in rows["status"]], np.int8)
    length, supervised = rows["length"].astype(np.int64), rows["supervised"].astype(np.int64)
    counts = count_examples(status, length, supervised)
    lost = overlong_losses(status, length, rows["original_length"], rows["chunk"], rows["chunk_start"],
                           rows["supervised_lost"])
    inputs = rows["input"]
    counts.update(records=len(status), packs=0, tokens=0, supervised_tokens=0, tokens_lost=lost[0],
                  supervised_tokens_lost=lost[1],
                  by_input=[count_examples(status[inputs == k], length[inputs == k], supervised[inputs == k])
                            for k in range(num_inputs)])
    return counts


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), part=st.sampled_from([1, 2, 3, 5, 7, 64]))
def test_counts_recounted_a_part_at_a_time_are_the_whole_table_counts(seed: int, part: int) -> None:
    rows = _random_table(np.random.default_rng(seed))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bookkeeping, "PART_ROWS", part)
        got = bookkeeping.recount([], rows, 3)
    assert got == _whole_table_counts(rows, 3)


def _straddling() -> dict:
    """One split example, its overlapping chunks in two parts of two rows (a third row ahead of it)."""
    return {"status": ["packed", "split", "split", "split"], "length": np.array([5, 10, 10, 10]),
            "supervised": np.array([5, 9, 9, 9]), "original_length": np.array([5, 24, 0, 0]),
            "chunk": np.array([0, 0, 1, 2]), "chunk_start": np.array([0, 0, 7, 14]),
            "supervised_lost": np.zeros(4, np.int64), "input": np.zeros(4, np.int64)}


def test_counts_carry_an_example_across_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """An example whose chunks straddle two parts is covered once (24 tokens: 0, 0 lost); a part counted without
    the reach carried into it (the guard's breach) counts the overlap twice and gets the loss wrong."""
    monkeypatch.setattr(bookkeeping, "PART_ROWS", 2)
    rows = _straddling()
    assert bookkeeping.recount([], rows, 1)["tokens_lost"] == _whole_table_counts(rows, 1)["tokens_lost"] == 0
    monkeypatch.setattr(bookkeeping, "_cover_again", lambda shift, part: bookkeeping._cover_part((shift, None),
                                                                                                  part[0]))
    assert bookkeeping.recount([], rows, 1)["tokens_lost"] != 0


def _counted_bytes(directory: Path) -> int:
    """What the driver receives from the workers recounting ``counts`` of ``directory`` in two parts."""
    artifact, manifest = _read(directory)
    counting = load_script("bench_verify_spread").Counting(LocalEngine(1))  # the benchmark's own counter
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bookkeeping, "PART_ROWS", -(-artifact.seam.rows // 2))
        counts = bookkeeping.recount(artifact.packs.totals.values(), artifact.seam, len(manifest.inputs), counting)
    assert counts["records"] == artifact.seam.rows
    return counting.received


def test_driver_receives_partial_counts_not_a_count_a_row(sized, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two parts each: ten times the rows a part, the same bytes back."""
    assert _counted_bytes(sized[2000]) <= _counted_bytes(sized[200]) + 64
    # the guard, fed what it guards against: workers that also hand back each row's status
    counted = bookkeeping._count_part
    monkeypatch.setattr(bookkeeping, "_count_part", lambda n, part: (*counted(n, part), part[0]))
    assert _counted_bytes(sized[2000]) > _counted_bytes(sized[200]) + 64


@pytest.fixture(scope="module")
def sized(tmp_path_factory, tokenizer_dir) -> dict[int, Path]:
    """Artifacts of 200 and 2,000 short documents."""
    from conftest import write_jsonl

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = {}
    for n in (200, 2000):
        tmp = tmp_path_factory.mktemp(f"n{n}")
        src = write_jsonl(tmp / "docs.jsonl", [{"text": f"document {k} says {k * 7 % 13} things"} for k in range(n)])
        pack_corpus(PackConfig(inputs=(str(src),), tokenizer=str(tokenizer_dir), out=tmp / "out", capacity=256,
                               packs_per_shard=8))
        out[n] = tmp / "out"
    return out


def _received(directory: Path) -> int:
    """What the driver receives from the workers judging the global bookkeeping and the copies of
    ``directory`` (partitions of 64 rows or lines, so the larger artifact spans ten times the partitions)."""
    artifact, manifest = _read(directory)
    engine = load_script("bench_verify_spread").Counting(LocalEngine(1))  # the benchmark's own counter
    inputs = manifest.inputs
    bookkeeping._suspects(engine, artifact, artifact.seam, inputs, occurrences([entry.sha256 for entry in inputs]))
    result = CheckResult("copies")
    copies.check_copies(artifact.seam, manifest, result, engine=engine)
    assert result.ok and result.checked == artifact.seam.rows
    return engine.received


def test_driver_receives_the_suspects_not_the_examples(sized, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bookkeeping, "PART_ROWS", 64)
    monkeypatch.setattr(copies, "PART_LINES", 64)
    assert _received(sized[2000]) <= _received(sized[200]) + 1024
    # the guard, fed what it guards against: workers that hand back a judgement a row
    leaky = bookkeeping._judge_partition
    monkeypatch.setattr(bookkeeping, "_judge_partition", lambda common, part: (*leaky(common, part), part[0]))
    assert _received(sized[2000]) > _received(sized[200]) + 1024


def test_judging_partitions_with_a_planted_breach_differs(packed, small_parts: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Partitions that split an id's rows from its segments would see a clean table as broken: the
    differential tests above can fail."""
    artifact, manifest = _read(packed)
    inputs = manifest.inputs
    occurrence = occurrences([entry.sha256 for entry in inputs])
    monkeypatch.setattr(bookkeeping, "_labels", lambda values, parts: np.arange(len(values)) * parts // len(values))
    got, _ = bookkeeping._suspects(LocalEngine(1), artifact, artifact.seam, inputs, occurrence)
    assert len(got) > 0


def test_driver_receives_segments_not_tokens(packed, monkeypatch: pytest.MonkeyPatch) -> None:
    """Integrity's workers hand back each shard's findings, totals and segments (8 numbers a segment), not its
    tokens; a worker that also hands back the shard's tokens (the guard's breach) exceeds the same bound."""
    from packcli.verify import integrity

    def received() -> tuple[int, int, int]:
        manifest = Manifest.of(json.loads((packed / "manifest.json").read_text()))
        report = VerifyReport(str(packed))
        engine = load_script("bench_verify_spread").Counting(LocalEngine(1))
        artifact = integrity.check_integrity(packed, manifest, report.check("integrity"), report.check("pack_layout"),
                                             engine=engine)
        assert report.ok
        tokens = sum(t.tokens for t in artifact.packs.totals.values())
        return engine.pickled, len(artifact.packs.columns.example_id), tokens

    pickled, segments, tokens = received()
    bound = 8 * 8 * segments + 2048 * len(manifest_shards(packed))
    assert pickled <= bound < 4 * tokens  # the bound would not hold the tokens
    task = integrity.read_shard_task

    def leaky(common, item):
        shard = task(common, item)
        shard.layout.note = read_shard(packed / item[0].name)["input_ids"].combine_chunks().values.to_numpy()  # tokens
        return shard

    monkeypatch.setattr(integrity, "read_shard_task", leaky)
    assert received()[0] > bound


def manifest_shards(directory: Path) -> list:
    return json.loads((directory / "manifest.json").read_text())["shards"]


# --- on Ray: the same reports as the local engine ---

RAY_FAULTS = [f for f in FAULTS if f.name in ("duplicate", "line-repeated", "ids-renumbered", "copy-claimed",
                                                "byte-flip", "cu-merged")]


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", [None, *RAY_FAULTS], ids=["clean", *(f.name for f in RAY_FAULTS)])
def test_verify_on_ray_reports_what_local_reports(ray_session, fault, packed, tmp_path: Path,
                                                  small_parts: None) -> None:
    from packcli.engine.ray import RayEngine

    copy = prepare_workspace(packed, tmp_path / "ws")
    if fault is not None:
        fault.apply(copy, tmp_path / "ws")
    local = verify_artifact(copy, workers=1, max_violations=1000)
    remote = verify_artifact(copy, engine=RayEngine(workers=2), max_violations=1000)
    assert json.dumps(remote.to_dict()) == json.dumps(local.to_dict())
    assert local.ok is (fault is None)


class Shuffled:
    """An engine whose tasks finish in a seeded random order (each run here, in that order)."""

    name, shares_paths = "shuffled", True

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def session(self, warm=None, work=None):
        return nullcontext()

    def map(self, fn, common, items, on_done=lambda item, result: None, *, keep=True):
        results = {}
        for k in self.rng.permutation(len(items)).tolist():
            result = fn(common, items[k])
            on_done(items[k], result)
            results[k] = result if keep else None
        return [results[k] for k in range(len(items))]


def _square(offset: int, x: int) -> int:
    return offset + x * x


@pytest.mark.parametrize("seed", range(8))
def test_each_part_takes_results_in_partition_order_however_they_finish(seed: int) -> None:
    """`each_part` hands each result on in partition order although the engine finishes them in any order; the
    breach (taking them as they arrive) would give the engine's order, which the seeds make differ."""
    taken = []
    spread.each_part(Shuffled(seed), _square, 1, 12, lambda p: p, taken.append)
    assert taken == [1 + p * p for p in range(12)]
    arrived = []
    Shuffled(seed).map(_square, 1, list(range(12)), lambda item, result: arrived.append(result))
    assert arrived != taken  # the engine's own order: what a driver taking results as they come would see


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("fault", [f for f in SPREAD_FAULTS if f.check in ("integrity", "pack_layout")],
                         ids=[f.name for f in SPREAD_FAULTS if f.check in ("integrity", "pack_layout")])
def test_shards_read_in_any_order_report_as_in_order(fault, seed: int, packed, tmp_path: Path) -> None:
    """Integrity's shards finishing in any order on the workers: the same report, finding for finding, as reading
    them one after the other here."""
    copy = faulted_copy(packed, fault, tmp_path)
    here = verify_artifact(copy, reconstruct=False, max_violations=1000)
    shuffled = verify_artifact(copy, reconstruct=False, max_violations=1000, engine=Shuffled(seed))
    assert json.dumps(shuffled.to_dict()) == json.dumps(here.to_dict())
    assert not here.ok


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), block=st.sampled_from([1, 3, 8, 1 << 20]))
def test_gathering_a_block_at_a_time_is_taking(seed: int, block: int) -> None:
    """`SeamColumns.gather` (rows read a block of the table at a time) gives what `take` gives, for every kind of
    column, a forger's token_hash values included."""
    from packcli.job.scratch import IN_MEMORY
    from packcli.verify import columns as cols

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    odd = {int(i): "not hex" for i in rng.choice(n, size=min(n, int(rng.integers(0, 3))), replace=False)} if n else {}
    rows = cols.SeamColumns({"example_id": cols.Ints(rng.integers(0, 2**62, n)), "line": cols.Ints(rng.integers(-5, 5, n).astype(np.int32)),
                             "status": cols.Strings(rng.integers(-1, 3, n).astype(np.int32), ["a", "b", "c"]),
                             "token_hash": cols.Hashes(rng.integers(0, 2**63, n).astype(np.uint64), odd)})
    picked = np.flatnonzero(rng.random(n) < 0.5)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cols, "BLOCK", block)
        got = rows.gather(["example_id", "line", "status", "token_hash"], picked, IN_MEMORY)
    want = rows.take(picked)
    for name in ("example_id", "line", "status", "token_hash"):
        assert list(got[name]) == list(want[name]), name
