"""`packcli.verify.replan` (the ``plan`` check): every fate, pack and position is what the pinned config
makes of the reconstructed lengths, in the inputs' own order, never the order of the table under test."""

from __future__ import annotations

import random
from dataclasses import asdict

import pytest
from conftest import seam_rows
from forgery import caught, manifest_of, roomiest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcli.contract import IGNORE_INDEX, SEAM_TABLE_NAME, token_hash
from packcli.verify import forge, verify_artifact
from packcli.verify.forge import Segment, follow_packs, read_segments, reseal, rewrite_seam, write_segments
from packcli.verify.report import CheckResult

# every plan check below runs file-backed too (tests/conftest.py): the same report, over files
pytestmark = pytest.mark.usefixtures("plan_file_backed_too")


def test_a_truncated_example_marked_dropped(packed_copy):
    """--overlong truncate: a truncation that keeps supervised tokens removed and called 'dropped'."""
    rows = seam_rows(packed_copy)
    i = next(i for i, r in enumerate(rows) if r["status"] == "truncated")
    row = rows[i]
    k = int(row["shard"][6:11])
    packs = read_segments(packed_copy, k)
    packs[row["row"]] = [s for s in packs[row["row"]] if s.example_id != row["example_id"]]
    write_segments(packed_copy, k, packs)
    full = forge.fresh_example(packed_copy, row["input"], row["line"])
    capacity = manifest_of(packed_copy)["config"]["capacity"]

    def drop(rows: list[dict]) -> None:
        rows[i].update(status="dropped", shard=None, row=-1, offset=-1, length=0, supervised=0,
                       supervised_lost=full.supervised, token_hash=token_hash(full.input_ids),
                       reason=f"{len(full.input_ids)} tokens > capacity {capacity}; truncation would keep no "
                              "supervised tokens")
    rewrite_seam(packed_copy, drop)
    follow_packs(packed_copy)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "plan", "it must be truncated, not dropped")


def test_a_dropped_example_smuggled_in_as_truncated(drop_copy):
    """--overlong drop: a dropped example's first capacity tokens put in a new pack and called 'truncated'."""
    m = manifest_of(drop_copy)
    capacity, last = m["config"]["capacity"], len(m["shards"]) - 1
    rows = seam_rows(drop_copy)
    i = next(i for i, r in enumerate(rows) if r["status"] == "dropped")
    full = forge.fresh_example(drop_copy, rows[i]["input"], rows[i]["line"])
    kept = full.labels[:capacity]
    packs = read_segments(drop_copy, last)
    packs.append([Segment(rows[i]["example_id"], full.input_ids[:capacity].tolist(), kept.tolist())])
    write_segments(drop_copy, last, packs)
    supervised = int((kept != IGNORE_INDEX).sum())

    def smuggle(rows: list[dict]) -> None:
        rows[i].update(status="truncated", reason=f"{len(full.input_ids)} tokens > capacity {capacity}; truncated to "
                       f"{capacity}", supervised=supervised, supervised_lost=full.supervised - supervised)
    rewrite_seam(drop_copy, smuggle)
    follow_packs(drop_copy)
    reseal(drop_copy, recount_counts=True)
    caught(drop_copy, "plan", "it must be dropped")


def test_two_examples_swapped_within_a_pack(packed_copy):
    packs = read_segments(packed_copy, 0)
    r = next(r for r, p in enumerate(packs) if len(p) > 1)
    packs[r][0], packs[r][1] = packs[r][1], packs[r][0]
    write_segments(packed_copy, 0, packs)
    follow_packs(packed_copy)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "plan", "not where the plan puts them")
    caught(packed_copy, "plan", "not where the plan puts them", "--no-reconstruct")  # from the seam table's lengths


def test_an_example_moved_to_another_pack(packed_copy):
    k, r, room = roomiest(packed_copy)
    packs = read_segments(packed_copy, k)
    source = next(q for q, p in enumerate(packs) if q != r and len(p) > 1 and len(p[-1].input_ids) <= room)
    packs[r].append(packs[source].pop())
    write_segments(packed_copy, k, packs)
    follow_packs(packed_copy)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "plan", "not where the plan puts them")


def test_shard_rows_shuffled(packed_copy):
    packs = read_segments(packed_copy, 1)
    random.Random(0).shuffle(packs)
    write_segments(packed_copy, 1, packs)
    follow_packs(packed_copy)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "plan", "not where the plan puts them")


@pytest.mark.parametrize(("edit", "phrase"), [
    (lambda c: c.update(seed=1), "config.seed=1"),
    (lambda c: c.update(shuffle=False), "config.shuffle=False"),
    (lambda c: c.update(window=7), "config.window=7"),
    (lambda c: c.update(strategy="sequential", window=None), "config.strategy='sequential'"),
    (lambda c: c.update(strategy="best"), "config.strategy 'best' is not a strategy"),
    (lambda c: c.update(capacity=2048), "config.capacity 2048"),
    (lambda c: c.update(min_density=0.999), "config.min_density is not met"),
], ids=["seed", "shuffle", "window", "strategy", "not-a-strategy", "capacity-raised", "budget"])
def test_plan_settings_forged(edit, phrase, packed_copy):
    reseal(packed_copy, lambda m: edit(m["config"]))
    caught(packed_copy, "plan", phrase)


def test_metrics_forged(packed_copy):
    reseal(packed_copy, lambda m: m["metrics"].update(density=1.0))
    caught(packed_copy, "plan", "metrics.density")


@pytest.mark.parametrize(("column", "check", "phrase"), [
    ("supervised_lost", "plan", "supervised_lost is"),
    ("original_length", "reconstruction", "original_length is"),
    ("reason", "plan", "reason is"),
])
def test_seam_columns_forged(column, check, phrase, packed_copy):
    def edit(rows: list[dict]) -> None:
        row = next(r for r in rows if r["status"] == "truncated")
        row[column] = row[column] + 1 if isinstance(row[column], int) else row[column] + " (edited)"
    rewrite_seam(packed_copy, edit)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, check, phrase)


def test_seam_rows_reversed_and_the_packs_replanned_for_that_order(packed_copy):
    """pack's own planner run on the reversed table: a forger chooses which examples share a pack."""
    before = {s.example_id for p in read_segments(packed_copy, 0) for s in p}
    forge.replan(packed_copy, lambda rows: rows[::-1])
    assert {s.example_id for p in read_segments(packed_copy, 0) for s in p} != before  # other packs now
    for extra in ((), ("--no-reconstruct",)):
        report = caught(packed_copy, "plan", "not where the plan puts them", *extra)
        messages = [v["message"] for c in report["checks"] for v in c["violations"]]
        assert any("not in input order" in m for m in messages), messages


def test_inputs_listed_in_another_order(packed_copy):
    """The manifest's inputs swapped (the seam table renumbered to follow) and the packs replanned in that order."""
    m = manifest_of(packed_copy)
    a, b = 0, 1
    swap = {a: b, b: a}

    def reorder(rows: list[dict]) -> list[dict]:
        for r in rows:
            r["input"] = swap.get(r["input"], r["input"])
        return sorted(rows, key=lambda r: (r["input"], r["line"], r["copy"]))
    forge.replan(packed_copy, reorder)
    def swap_inputs(m: dict) -> None:  # where each input was read, too, so each is found and hashes as pinned
        for listing in (m["inputs"], m["unhashed"]["provenance"]["inputs"]):
            listing[a], listing[b] = listing[b], listing[a]
    reseal(packed_copy, swap_inputs, recount_counts=True)
    assert manifest_of(packed_copy)["inputs"][0]["name"] == m["inputs"][1]["name"]
    caught(packed_copy, "plan", "not in the order pack reads them")


def test_a_packed_row_shorter_than_its_record_is_caught(packed_copy):
    """The seam table says packed with L - 1 tokens where the record has L: the pack holds a prefix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from packcli.verify.faults import _reseal

    path = packed_copy / SEAM_TABLE_NAME
    seam = pq.read_table(path)
    i = seam["status"].to_pylist().index("packed")
    lengths = seam["length"].to_pylist()
    lengths[i] -= 1
    pq.write_table(seam.set_column(seam.schema.get_field_index("length"), "length", pa.array(lengths, pa.int32())),
                   path, compression="zstd", write_statistics=False)
    _reseal(packed_copy)
    check = next(c for c in verify_artifact(packed_copy).checks if c.name == "plan")
    assert any(v.field == "length" and f"length is {lengths[i]}" in v.message and f"gives {lengths[i] + 1}" in v.message
               for v in check.violations), check.violations


# --- the plan check file-backed (`Scratch`) gives the in-memory report on any forged table -------------------------

NUMBERS = ("length", "supervised", "supervised_lost", "chunk_start", "row", "offset", "original_length", "chunk")
EDITS = ("swap", "status", "reason", "shard", "number", "copy", "line", "input", "reject", "unvouch")


class _Sparse(dict):
    """Reconstruction's rejections as a mapping of the rejected rows alone (the others read None)."""

    def __missing__(self, row: int) -> None:
        return None


def _forged(directory, edits, vouch, sparse=False):  # noqa: ANN001, ANN202
    """The seam table of ``directory`` with ``edits`` (kind, row, pick, delta) made to its columns, and facts as
    reconstruction would give them for it (None: ``--no-reconstruct``), some of them edited too; ``sparse``: the
    rejections a mapping of the rejected rows, not a list a row."""
    import numpy as np

    from packcli.verify.columns import Ints, SeamColumns, Strings, read_seam_columns
    from packcli.verify.reconstruct import Reconstructed

    rows, _ = read_seam_columns(directory / SEAM_TABLE_NAME)
    capacity = manifest_of(directory)["config"]["capacity"]
    columns = {name: (Strings(c.codes.copy(), list(c.names)) if isinstance(c, Strings) else
                      Ints(np.array(c.values)) if isinstance(c, Ints) else c) for name, c in rows.items()}
    n = rows.rows
    original = columns["original_length"].values
    rejected = columns["status"].isin(["rejected"])  # re-parsing rejects them again, for the table's reason
    facts = Reconstructed(np.where(original <= capacity, original, -1).astype(np.int64),  # no over-long: no cut asked
                          (columns["supervised"].values + columns["supervised_lost"].values).astype(np.int64), {},
                          [rows["reason"][i] if rejected[i] else None for i in range(n)])
    order = np.arange(n)
    for kind, i, pick, delta in edits:
        i %= n
        if kind in ("status", "reason", "shard"):
            column = columns[kind]
            column.codes[i] = pick % (len(column.names) + 1) - 1  # -1: null
        elif kind == "number":
            columns[NUMBERS[pick % len(NUMBERS)]].values[i] += delta
        elif kind == "copy":
            columns["copy"].values[i] = abs(delta)
        elif kind == "line" and i:
            columns["line"].values[i] = columns["line"].values[i - 1]  # two examples made one
        elif kind == "input":
            columns["input"].values[i] = pick % 6 - 1
        elif kind == "swap":
            order[[i, pick % n]] = order[[pick % n, i]]
        elif kind == "reject":
            facts.rejection[i] = f"forged rejection {delta}"
        elif kind == "unvouch":
            facts.length[i] = -1
    table = SeamColumns(columns)
    if not np.array_equal(order, np.arange(n)):
        table = table.take(order)
        facts = Reconstructed(facts.length[order], facts.supervised[order], {}, [facts.rejection[j] for j in order])
    if sparse:
        facts = Reconstructed(facts.length, facts.supervised, facts.cuts,
                              _Sparse({i: why for i, why in enumerate(facts.rejection) if why is not None}))
    return table, facts if vouch else None


def _outcome(check, *args):  # noqa: ANN001, ANN202
    """The plan check's report, or the exception it raised."""
    from dataclasses import asdict

    from packcli.verify.report import CheckResult

    result = CheckResult("plan", limit=20)
    try:
        check(*args[:3], result, *args[3:])
    except Exception as error:  # noqa: BLE001 - compared, not hidden: both runs must raise the same
        return type(error).__name__, str(error)
    return asdict(result)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["packed", "split_packed"]), vouch=st.booleans(), sparse=st.booleans(),
       edits=st.lists(st.tuples(st.sampled_from(EDITS), st.integers(0, 10**6), st.integers(0, 100), st.integers(-2, 2)),
                      max_size=3))
def test_a_forged_table_gives_the_same_report_in_memory_and_file_backed(which, vouch, sparse, edits, request,
                                                                         tmp_path_factory):
    """Whatever a forger changes in the seam table (or reconstruction finds), the plan check over file-backed
    columns, its block-wise passes crossing a block boundary every 3 rows, reports what it reports in memory."""
    from forgery import file_backed

    from packcli.artifact import manifest as mf
    from packcli.verify.replan import check_plan

    directory = request.getfixturevalue(which)
    manifest = mf.Manifest.of(mf.read_manifest(directory))
    rows, facts = _forged(directory, edits, vouch, sparse)
    memory = _outcome(check_plan, manifest, rows, facts)
    if sparse and vouch:  # reconstruction's rejections as a list a row or a mapping of the rejected rows: one report
        assert _outcome(check_plan, manifest, *_forged(directory, edits, vouch)) == memory
    folder = tmp_path_factory.mktemp("forged") / "scratch"
    with file_backed(folder) as scratch:
        assert _outcome(check_plan, manifest, rows, facts, scratch) == memory
    assert any(folder.iterdir()) or isinstance(memory, tuple)  # its columns were files (unless it raised early)


def _planted(n: int, manifest):  # noqa: ANN001, ANN202
    """A sound seam table of ``n`` short examples of input 0, placed by pack's own planner under ``manifest``'s
    config (its shards and metrics are the fixture's: a few artifact-wide findings, none per example)."""
    import numpy as np

    from packcli.contract import PACKED, shard_name
    from packcli.job.fates import Fates
    from packcli.job.plan import place_examples, plan_examples
    from packcli.verify.columns import Hashes, Ints, SeamColumns, Strings

    settings = manifest.config
    length = np.random.default_rng(0).integers(1, 64, n).astype(np.int64)
    fates = Fates(np.full(n, PACKED, np.int8), length, length // 2, np.zeros(n, np.int64), [""] * n)
    placement = place_examples(plan_examples(fates, settings), fates, settings.packs_per_shard)
    ints = {"example_id": np.arange(n), "input": np.zeros(n, np.int32), "line": np.arange(1, n + 1, dtype=np.int32),
            "copy": np.zeros(n, np.int32), "chunk": np.zeros(n, np.int32), "chunk_start": np.zeros(n, np.int32),
            "row": placement.row, "offset": placement.offset, "length": length.astype(np.int32),
            "original_length": length.astype(np.int32), "supervised": (length // 2).astype(np.int32),
            "supervised_lost": np.zeros(n, np.int32)}
    one = np.zeros(n, np.int32)
    return SeamColumns({**{name: Ints(values) for name, values in ints.items()},
                        "source": Strings(one, [manifest.inputs[0].name]), "status": Strings(one, ["packed"]),
                        "reason": Strings(one, [""]), "format": Strings(one, ["chat"]),
                        "shard": Strings(placement.shard, [shard_name(k) for k in range(placement.num_shards)]),
                        "token_hash": Hashes(np.zeros(n, np.uint64), {})})


def test_the_file_backed_plan_check_holds_its_columns_in_files_not_in_memory(packed, tmp_path, monkeypatch):
    """What the plan check allocates in memory (tracemalloc: numpy's arrays, not the pages of a mapped file),
    on a planted table of 200,000 examples: over 100 bytes an example in memory (163 measured), under 16 file-backed
    (8 measured, blocks of 4,096 rows: what is left is a block's, a pack's, and the planner's own percentile of the
    displacements, `packcli.pack.strategies.measure_packing`). The same report either way."""
    import tracemalloc

    import packcli.job.scratch
    from packcli.artifact import manifest as mf
    from packcli.job.scratch import Scratch
    from packcli.verify.replan import check_plan

    manifest = mf.Manifest.of(mf.read_manifest(packed))
    check_plan(manifest, _planted(1000, manifest), None, CheckResult("plan"))  # imports and compiled kernels: first
    monkeypatch.setattr(packcli.job.scratch, "BLOCK", 4096)
    n, rows = 200_000, _planted(200_000, manifest)
    peaks, reports = [], []
    for scratch in (Scratch(None), Scratch(tmp_path)):
        result = CheckResult("plan")
        tracemalloc.start()
        check_plan(manifest, rows, None, result, scratch)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        reports.append(asdict(result))
    assert reports[0] == reports[1] and reports[0]["checked"] == n
    assert not any(v["example_id"] is not None for v in reports[0]["violations"])  # sound per example
    assert peaks[0] > 100 * n and peaks[1] < 16 * n, peaks
    assert sum(f.stat().st_size for f in tmp_path.iterdir()) > 100 * n  # where the columns went


def test_an_accepted_example_of_no_tokens_is_named_not_a_crash(packed_copy):
    """A packed row's original_length forged to 0 (the whole artifact re-sealed) under --no-reconstruct: the planner
    packs 1 to capacity tokens an example, so the plan check names the row instead of failing inside the planner."""
    def empty(rows: list[dict]) -> None:
        next(r for r in rows if r["status"] == "packed")["original_length"] = 0
    rewrite_seam(packed_copy, empty)
    reseal(packed_copy, recount_counts=True)
    report = caught(packed_copy, "plan", "original_length is 0, but it is not rejected", "--no-reconstruct")
    plan = next(c for c in report["checks"] if c["name"] == "plan")
    assert plan["count"] == 1 and plan["violations"][0]["field"] == "original_length"
