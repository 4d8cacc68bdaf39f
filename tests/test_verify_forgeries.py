"""Consistent forgeries: each edits an artifact and re-seals everything a forger could recompute (shard
and seam hashes, rows, bytes, per-shard tokens, counts, records, manifest_sha256), so no hash can
tell. ``packcli verify`` must still exit 1, and the check that owns the fault must name it.

Beside `verify --self-test` (packcli/verify/faults.py): these cover every forgery of issue 29 that
passed before verify re-derived the plan, recomputed every hashed field and tied the packs to the
seam table as a bijection.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from packcli.cli import app
from packcli.contract import IGNORE_INDEX, example_id, file_sha256, token_hash
from packcli.verify import forge, verify_artifact
from packcli.verify.forge import (
    Segment,
    follow_packs,
    read_segments,
    reseal,
    rewrite_packs,
    rewrite_seam,
    write_segments,
)

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


def manifest_of(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def seam_rows(d: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(d / "examples.parquet").to_pylist()


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


@pytest.fixture(scope="module")
def packed_drop(tmp_path_factory, corpus_files, tokenizer_dir) -> Path:
    """The fixture corpus with over-long examples dropped (the `packed` fixture truncates them)."""
    from conftest import FIXTURES

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = tmp_path_factory.mktemp("drop") / "packed"
    pack_corpus(PackConfig(inputs=tuple(corpus_files + [str(FIXTURES / "corpus" / "broken.jsonl")]),
                           tokenizer=str(tokenizer_dir), out=out, capacity=1024, packs_per_shard=16,
                           overlong="drop"))
    return out


@pytest.fixture()
def drop_copy(packed_drop, tmp_path) -> Path:
    import shutil

    shutil.copytree(packed_drop, tmp_path / "drop")
    return tmp_path / "drop"


def test_the_copies_verify_before_any_forgery(packed, packed_drop):
    assert verify_artifact(packed).ok and verify_artifact(packed_drop).ok
    assert any(r["status"] == "dropped" for r in seam_rows(packed_drop))
    assert any(r["status"] == "truncated" for r in seam_rows(packed))


# --- bookkeeping: the seam table and the packs are a bijection ---


def _smuggle(d: Path, ids: list[int], labels: list[int], eid: int) -> None:
    """Add a segment to the roomiest pack with a seam row that repeats a real, packed line."""
    k, r, _ = roomiest(d)
    packs = read_segments(d, k)
    packs[r].append(Segment(eid, ids, labels))
    write_segments(d, k, packs)

    def add_row(rows: list[dict]) -> None:
        twin = next(i for i, row in enumerate(rows) if row["status"] == "packed")
        rows.insert(twin + 1, dict(rows[twin], example_id=eid, original_length=len(ids),
                                   supervised=0, supervised_lost=0))
    rewrite_seam(d, add_row)
    follow_packs(d)
    reseal(d, recount_counts=True)


def test_a_second_row_for_a_line_cannot_smuggle_in_supervised_garbage(packed_copy):
    ids = [random.Random(0).randrange(4, 2000) for _ in range(40)]
    _smuggle(packed_copy, ids, [IGNORE_INDEX] + ids[1:], eid=123_456_789)
    caught(packed_copy, "global", "both name")
    caught(packed_copy, "global", "is not the id of its input, line and copy")


def test_a_trailing_padding_segment_is_not_an_example(packed_copy):
    _, _, room = roomiest(packed_copy)
    _smuggle(packed_copy, [0] * room, [IGNORE_INDEX] * room, eid=987_654_321)
    caught(packed_copy, "global", "both name")


def test_a_whole_pack_duplicated_under_fresh_ids(packed_copy):
    packs = read_segments(packed_copy, 3)
    fresh = {s.example_id: s.example_id + 1 for s in packs[0]}
    packs.append([Segment(fresh[s.example_id], s.input_ids, s.labels) for s in packs[0]])
    write_segments(packed_copy, 3, packs)
    rewrite_seam(packed_copy, lambda rows: rows.extend(dict(r, example_id=fresh[r["example_id"]])
                                                       for r in list(rows) if r["example_id"] in fresh))
    follow_packs(packed_copy)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "global", "both name")


def test_an_extra_dropped_record_beyond_the_source(packed_copy):
    """301 records from a 300-line corpus: a dropped row for a line the file does not have, its id by the formula."""
    k, entry = next((k, e) for k, e in enumerate(manifest_of(packed_copy)["inputs"]) if e["name"] == "openai.jsonl")
    line = entry["records"] + 1

    def add_row(rows: list[dict]) -> None:
        last = max(i for i, r in enumerate(rows) if r["input"] == k)
        rows.insert(last + 1, dict(rows[last], example_id=example_id(entry["sha256"], 0, line), line=line,
                                   status="dropped", reason="2000 tokens > capacity 1024; truncation would keep no "
                                   "supervised tokens", shard=None, row=-1, offset=-1, length=0,
                                   original_length=2000, supervised=0, supervised_lost=10))
    rewrite_seam(packed_copy, add_row)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "reconstruction", "not a record in the source")
    caught(packed_copy, "reconstruction", f"{line - 1} records read from the source, inputs[{k}].records says {line}")


def test_a_shard_listed_twice(packed_copy):
    reseal(packed_copy, lambda m: m["shards"].append(dict(m["shards"][0])))
    caught(packed_copy, "integrity", "listed twice")


def test_every_id_renumbered(packed_copy):
    for k in range(len(manifest_of(packed_copy)["shards"])):
        packs = read_segments(packed_copy, k)
        write_segments(packed_copy, k, [[Segment(s.example_id + 1, s.input_ids, s.labels) for s in p] for p in packs])
    rewrite_seam(packed_copy, lambda rows: [r.update(example_id=r["example_id"] + 1) for r in rows])
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "global", "is not the id of its input, line and copy")


def test_two_lines_swapped_with_their_ids_recomputed(packed_copy):
    """The forger swaps two records' lines and gives each the documented id of its new line."""
    m = manifest_of(packed_copy)
    sha = [e["sha256"] for e in m["inputs"]]
    rows = seam_rows(packed_copy)
    a, b = [i for i, r in enumerate(rows) if r["status"] == "packed" and r["source"] == "openai.jsonl"][:2]
    new = {rows[a]["example_id"]: example_id(sha[rows[a]["input"]], 0, rows[b]["line"]),
           rows[b]["example_id"]: example_id(sha[rows[b]["input"]], 0, rows[a]["line"])}
    for k in range(len(m["shards"])):
        packs = read_segments(packed_copy, k)
        write_segments(packed_copy, k, [[Segment(new.get(s.example_id, s.example_id), s.input_ids, s.labels)
                                         for s in p] for p in packs])

    def swap(rows: list[dict]) -> None:
        rows[a]["line"], rows[b]["line"] = rows[b]["line"], rows[a]["line"]
        for i in (a, b):
            rows[i]["example_id"] = new[rows[i]["example_id"]]
        rows[a], rows[b] = rows[b], rows[a]  # input order by line again
    rewrite_seam(packed_copy, swap)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "reconstruction", "differ from a fresh tokenization")


def test_rejects_jsonl_edited_and_resealed(packed_copy):
    forge.rewrite_rejects(packed_copy, lambda rows: rows[0].update(reason="looked fine to me"))
    reseal(packed_copy)
    caught(packed_copy, "global", "rejects.jsonl line 1 is not what pack writes")


def test_rejects_jsonl_edited_without_resealing(packed_copy):
    forge.rewrite_rejects(packed_copy, lambda rows: rows.pop())
    caught(packed_copy, "integrity", "rejects.jsonl: sha256 differs")


# --- the over-long policy ---


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


# --- the plan: every example where the plan puts it ---


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


# --- hashed fields nothing checked before ---


def test_conventions_say_labels_are_shifted(packed_copy):
    reseal(packed_copy, lambda m: m["conventions"].update(labels="shifted"))
    caught(packed_copy, "manifest", "conventions.labels = 'shifted'")


def test_config_loss_disagrees_with_loss_policy(packed_copy):
    reseal(packed_copy, lambda m: m["config"].update(loss="all"))
    caught(packed_copy, "manifest", "config.loss 'all' and loss_policy 'auto' disagree")


def test_both_loss_fields_forged_alike(packed_copy):
    reseal(packed_copy, lambda m: (m["config"].update(loss="all"), m.update(loss_policy="all")))
    caught(packed_copy, "reconstruction", "labels differ from a fresh tokenization")


def test_input_format_forged(packed_copy):
    """Under --format messages the text and prompt/completion records would have been rejected."""
    reseal(packed_copy, lambda m: m["config"].update(input_format="messages"))
    caught(packed_copy, "reconstruction", "re-running gives rejection")


def test_per_shard_tokens_and_supervised_forged(packed_copy):
    edit_manifest(packed_copy, lambda m: m["shards"][1].update(tokens=m["shards"][1]["tokens"] - 5,
                                                               supervised=m["shards"][1]["supervised"] + 5))
    report = caught(packed_copy, "integrity", "shards[1].tokens")
    assert any("shards[1].supervised" in v["field"] for c in report["checks"] for v in c["violations"] if v["field"])


def test_inputs_records_forged(packed_copy):
    reseal(packed_copy, lambda m: m["inputs"][0].update(records=m["inputs"][0]["records"] + 1))
    caught(packed_copy, "global", "inputs[0].records")
    caught(packed_copy, "reconstruction", "inputs[0].records says")


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


def test_an_unknown_hashed_field(packed_copy):
    reseal(packed_copy, lambda m: m.update(reviewed_by="nobody"))
    caught(packed_copy, "manifest", "hashed field reviewed_by")


def test_bos_token_forged(packed_copy):
    reseal(packed_copy, lambda m: m["tokenizer"].update(bos_token="<|im_start|>"))
    caught(packed_copy, "contract_drift", "tokenizer.bos_token")


# --- reports name the real fault, never a traceback ---


def test_a_labels_row_shorter_than_its_input_ids(packed_copy):
    rewrite_packs(packed_copy, 0, lambda rows: rows[2]["labels"].pop())
    reseal(packed_copy)
    caught(packed_copy, "integrity", "malformed row: labels has")


def test_cu_seqlens_merged_across_a_seam(packed_copy):
    """Two examples merged into one segment (one id); the positions still restart at the seam."""
    def merge(rows: list[dict]) -> None:
        row = next(r for r in rows if len(r["cu_seqlens"]) > 2)
        del row["cu_seqlens"][1]
        del row["example_ids"][1]
        row["seq_lengths"][:2] = [row["seq_lengths"][0] + row["seq_lengths"][1]]  # TRL's seams follow
    rewrite_packs(packed_copy, 0, merge)
    reseal(packed_copy)
    report = caught(packed_copy, "pack_layout", "cu_seqlens merge examples across a seam")
    assert not any("position_ids not reset" in v["message"] for c in report["checks"] for v in c["violations"])


def test_lowered_capacity_is_not_blamed_on_a_worker(packed_copy):
    reseal(packed_copy, lambda m: m["config"].update(capacity=1000))
    report = caught(packed_copy, "pack_layout", "> config.capacity 1000", "--workers", "1")
    caught(packed_copy, "plan", "config.capacity 1000", "--workers", "1")
    messages = [v["message"] for c in report["checks"] for v in c["violations"]]
    assert not any("worker" in m or "tokenized it differently" in m for m in messages), messages


def test_a_seam_row_pointing_nowhere(packed_copy):
    rewrite_seam(packed_copy, lambda rows: next(r for r in rows if r["status"] == "packed").update(row=999))
    reseal(packed_copy)
    caught(packed_copy, "global", "the packs say")


def test_a_null_in_the_seam_table(packed_copy):
    import pyarrow.parquet as pq

    path = packed_copy / "examples.parquet"
    table = pq.read_table(path)
    lengths = table["length"].to_pylist()
    lengths[0] = None
    table = table.set_column(table.schema.get_field_index("length"), "length", pa.array(lengths, pa.int32()))
    pq.write_table(table, path)
    reseal(packed_copy)
    caught(packed_copy, "integrity", "null values in length")


def test_the_self_tests_overlong_fault_on_a_drop_artifact(packed_drop, tmp_path):
    """--self-test's overlong-policy fault takes the drop branch on a --overlong drop artifact."""
    from packcli.verify.faults import FAULTS, prepare_workspace

    fault = next(f for f in FAULTS if f.name == "overlong-policy")
    copy = prepare_workspace(packed_drop, tmp_path)
    fault.apply(copy, tmp_path)
    assert any("it must be dropped" in v.message for c in verify_artifact(copy).checks if c.name == "plan"
               for v in c.violations)


def test_a_fault_with_nothing_to_damage_says_so(corpus_files, tokenizer_dir, tmp_path):
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus
    from packcli.verify.faults import FAULTS, NotApplicable, prepare_workspace

    out = tmp_path / "roomy"
    pack_corpus(PackConfig(inputs=tuple(corpus_files[:1]), tokenizer=str(tokenizer_dir), out=out, capacity=4096))
    fault = next(f for f in FAULTS if f.name == "overlong-policy")
    with pytest.raises(NotApplicable, match="no truncated example|no dropped example"):
        fault.apply(prepare_workspace(out, tmp_path / "ws"), tmp_path / "ws")


@pytest.mark.parametrize(("edit", "field"), [
    (lambda m: m.pop("metrics"), "metrics"),
    (lambda m: m["config"].update(capacity="big"), "config.capacity"),
    (lambda m: m["shards"][0].pop("sha256"), "shards[0].sha256"),
    (lambda m: m.update(inputs={"name": "x"}), "inputs"),
], ids=["no-metrics", "capacity-a-string", "shard-without-sha256", "inputs-not-a-list"])
def test_a_malformed_manifest_is_named_not_a_traceback(edit, field, packed_copy):
    edit_manifest(packed_copy, edit)
    report = caught(packed_copy, "manifest", field)
    assert all(c["skipped"] for c in report["checks"] if c["name"] != "manifest")


# --- sources, duplicates and mixtures ---


def test_a_valid_but_wrong_column_mapping(packed_copy):
    """config.fields says text records were read from a field they do not have."""
    reseal(packed_copy, lambda m: m["config"].update(fields={"text": "body"}))
    caught(packed_copy, "reconstruction", "re-running gives rejection")


@pytest.fixture()
def mixed(corpus_files, tokenizer_dir, tmp_path) -> Path:
    """sharegpt.jsonl at half its records (some unsampled), text.jsonl twice over."""
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = tmp_path / "mixed"
    files = [f for f in corpus_files if f.endswith(("sharegpt.jsonl", "text.jsonl"))]
    pack_corpus(PackConfig(inputs=tuple(files), tokenizer=str(tokenizer_dir), out=out, capacity=1024,
                           packs_per_shard=16, mix="sharegpt.jsonl=0.5x,text.jsonl=2x"))
    return out


def test_a_mixed_pack_verifies(mixed):
    report = verify_artifact(mixed)
    rows = seam_rows(mixed)
    assert report.ok, [(c.name, [v.message for v in c.violations][:3]) for c in report.checks if not c.ok]
    assert any(r["status"] == "unsampled" for r in rows) and any(r["copy"] == 1 for r in rows)


def test_an_unsampled_record_smuggled_into_a_pack(mixed):
    """The forger packs a record the mixture did not draw, and calls it packed."""
    m, rows = manifest_of(mixed), seam_rows(mixed)
    i = next(i for i, r in enumerate(rows) if r["status"] == "unsampled")
    full = forge.fresh_example(mixed, rows[i]["input"], rows[i]["line"])
    last = len(m["shards"]) - 1
    packs = read_segments(mixed, last)
    packs.append([Segment(rows[i]["example_id"], full.input_ids.tolist(), full.labels.tolist())])
    write_segments(mixed, last, packs)
    rewrite_seam(mixed, lambda rows: rows[i].update(status="packed", reason="", supervised=full.supervised))
    follow_packs(mixed)
    reseal(mixed, recount_counts=True)
    caught(mixed, "copies", "the mixture draws no copy of it")
    caught(mixed, "plan", "the re-run plan")  # its packs are not the plan of the examples the mixture drew


def test_a_second_copy_dropped_from_a_mixture(mixed):
    """A record the mixture draws twice, its second copy removed from its pack and from the seam table."""
    rows = seam_rows(mixed)
    i = next(i for i, r in enumerate(rows) if r["copy"] == 1)
    row = rows[i]
    k = int(row["shard"].removeprefix("shard-").removesuffix(".parquet"))
    packs = read_segments(mixed, k)
    packs[row["row"]] = [s for s in packs[row["row"]] if s.example_id != row["example_id"]]
    write_segments(mixed, k, packs)
    rewrite_seam(mixed, lambda rows: rows.pop(i))
    follow_packs(mixed)
    reseal(mixed, recount_counts=True)
    caught(mixed, "copies", "config.mix")


# --- chunks of split examples (--overlong split) ---


@pytest.fixture(scope="module")
def packed_split(tmp_path_factory, corpus_files, tokenizer_dir) -> Path:
    """The fixture corpus at capacity 512, over-long examples split with an overlap of 32 tokens."""
    from conftest import FIXTURES

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = tmp_path_factory.mktemp("split") / "packed"
    pack_corpus(PackConfig(inputs=tuple(corpus_files + [str(FIXTURES / "corpus" / "broken.jsonl")]),
                           tokenizer=str(tokenizer_dir), out=out, capacity=512, packs_per_shard=16,
                           overlong="split", split_overlap=32))
    return out


@pytest.fixture()
def split_copy(packed_split, tmp_path) -> Path:
    import shutil

    shutil.copytree(packed_split, tmp_path / "split")
    return tmp_path / "split"


def _split_example(d: Path, *, chunks: int = 2, last_room: int = 0) -> list[int]:
    """The seam-table rows of the first split example with ``chunks`` chunks, all packed, whose last chunk
    leaves at least ``last_room`` tokens of room below the capacity."""
    rows, capacity = seam_rows(d), manifest_of(d)["config"]["capacity"]
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r["input"], r["line"], r["copy"]), []).append(i)
    return next(g for g in groups.values() if len(g) == chunks and all(rows[i]["status"] == "split" for i in g)
                and rows[g[-1]]["length"] + last_room <= capacity)


def _shard_of(row: dict) -> int:
    return int(row["shard"].removeprefix("shard-").removesuffix(".parquet"))


def _replace_segment(d: Path, row: dict, segment: Segment | None) -> None:
    """Put ``segment`` where ``row``'s chunk is in its pack (None: take the chunk out)."""
    k = _shard_of(row)
    packs = read_segments(d, k)
    pack, offset = packs[row["row"]], 0
    for q, s in enumerate(pack):
        if s.example_id == row["example_id"] and offset == row["offset"]:
            pack[q:q + 1] = [] if segment is None else [segment]
            break
        offset += len(s.input_ids)
    else:
        raise AssertionError("the chunk is not where its row says")
    write_segments(d, k, packs)


def _chunk_segment(d: Path, row: dict, chunk: int, start: int, length: int) -> Segment:
    """Chunk ``chunk`` of ``row``'s example cut at ``start`` for ``length`` tokens, masked as a chunk is."""
    from packcli.job.chunks import SplitRule, chunk_labels

    config = manifest_of(d)["config"]
    full = forge.fresh_example(d, row["input"], row["line"])
    rule = SplitRule(config["capacity"], config["split_overlap"], config["split_min_last"])
    return Segment(row["example_id"], full.input_ids[start:start + length].tolist(),
                   chunk_labels(full.labels, chunk, start, length, rule).tolist())


def test_a_split_pack_verifies_and_tiles_its_examples(packed_split):
    assert verify_artifact(packed_split).ok
    assert verify_artifact(packed_split, reconstruct=False).ok  # the plan from the seam table's own claims
    rows = seam_rows(packed_split)
    assert any(r["status"] == "dropped" and "holds no supervised token" in r["reason"] for r in rows)
    assert any(r["status"] == "split" and r["chunk"] == 2 for r in rows)
    overlap = manifest_of(packed_split)["config"]["split_overlap"]
    for g in (_split_example(packed_split), _split_example(packed_split, chunks=3)):
        starts = [rows[i]["chunk_start"] for i in g]
        assert starts == [k * (512 - overlap) for k in range(len(g))]
        assert rows[g[-1]]["chunk_start"] + rows[g[-1]]["length"] == rows[g[0]]["original_length"]


def test_a_chunk_dropped_from_its_pack_and_the_seam_table(split_copy):
    """The last chunk of an example taken out of its pack and its row deleted: its tokens are lost."""
    rows = seam_rows(split_copy)
    g = _split_example(split_copy)
    _replace_segment(split_copy, rows[g[-1]], None)
    rewrite_seam(split_copy, lambda rows: rows.pop(g[-1]))
    follow_packs(split_copy)
    reseal(split_copy, recount_counts=True)
    caught(split_copy, "plan", "chunk 1 (tokens 480..")
    caught(split_copy, "plan", "has no row: its tokens are lost")


@pytest.mark.parametrize(("chunk", "check", "phrase"), [
    (None, "plan", "chunk 1 has a second row: its tokens would be trained on twice"),
    (2, "plan", "chunk 2 is not a chunk of the example"),
], ids=["same-chunk", "renumbered-chunk-2"])
def test_a_chunk_duplicated_in_another_pack(chunk, check, phrase, split_copy):
    """A second copy of a chunk packed where there is room, with a seam row of its own naming the same chunk,
    or calling it chunk 2 of an example cut into two (a chunk the cut does not have)."""
    rows = seam_rows(split_copy)
    _, _, room = roomiest(split_copy)
    g = _split_example(split_copy, last_room=512 - room)
    row = rows[g[-1]]
    k, r, _ = roomiest(split_copy)
    chunk = row["chunk"] if chunk is None else chunk
    packs = read_segments(split_copy, k)
    packs[r].append(_chunk_segment(split_copy, row, chunk, row["chunk_start"], row["length"]))
    write_segments(split_copy, k, packs)
    rewrite_seam(split_copy, lambda rows: rows.insert(g[-1] + 1, dict(rows[g[-1]], chunk=chunk)))
    follow_packs(split_copy)
    reseal(split_copy, recount_counts=True)
    caught(split_copy, check, phrase)
    if chunk == row["chunk"]:
        caught(split_copy, "global", "both name")
    plan = next(c for c in verify_artifact(split_copy, reconstruct=False).checks if c.name == "plan")
    assert any(phrase in v.message for v in plan.violations)  # the plan sees it from the seam table alone too


def test_a_chunk_with_a_shifted_offset(split_copy):
    """Chunk 1 cut 7 tokens later than the rule says, its tokens and labels consistent with that start."""
    rows = seam_rows(split_copy)
    g = _split_example(split_copy)
    row = rows[g[1]]
    shifted = _chunk_segment(split_copy, row, 1, row["chunk_start"] + 7, row["length"] - 7)
    _replace_segment(split_copy, row, shifted)
    rewrite_seam(split_copy, lambda rows: rows[g[1]].update(chunk_start=row["chunk_start"] + 7))
    follow_packs(split_copy)
    reseal(split_copy, recount_counts=True)
    caught(split_copy, "plan", f"chunk_start is {row['chunk_start'] + 7}")


def _forge_chunk_1_labels(d: Path, edit) -> None:  # noqa: ANN001 - edit(labels, full example) in place
    """Chunk 1 of a split example rewritten with its labels edited, everything else consistent, re-sealed."""
    rows = seam_rows(d)
    row = rows[_split_example(d)[1]]
    segment = _chunk_segment(d, row, 1, row["chunk_start"], row["length"])
    edit(segment, forge.fresh_example(d, row["input"], row["line"]).labels[row["chunk_start"]:].tolist())
    _replace_segment(d, row, segment)
    follow_packs(d)
    reseal(d, recount_counts=True)


def test_a_chunk_whose_first_label_is_not_masked(split_copy):
    """Chunk 1 trained to predict its first token from nothing: the seam label supervised."""
    _forge_chunk_1_labels(split_copy, lambda segment, full: segment.labels.__setitem__(0, segment.input_ids[0]))
    caught(split_copy, "pack_layout", "seam label supervised")
    caught(split_copy, "reconstruction", "labels differ from a fresh tokenization at position 0")


def test_a_chunk_whose_overlap_is_supervised_twice(split_copy):
    """The overlap of chunk 1 (context, supervised in chunk 0) given its labels back: trained on twice."""
    _forge_chunk_1_labels(split_copy, lambda segment, full: segment.labels.__setitem__(slice(1, 32), full[1:32]))
    caught(split_copy, "reconstruction", "labels differ from a fresh tokenization at position 1")
    caught(split_copy, "plan", "supervised is")


def test_a_chunk_boundary_moved(split_copy):
    """Chunk 0 cut 10 tokens short and chunk 1 started 10 tokens earlier: every token still packed once,
    every label consistent, but not the cut the pinned rule makes."""
    rows = seam_rows(split_copy)
    g = _split_example(split_copy, last_room=10)
    first, second = rows[g[0]], rows[g[1]]
    _replace_segment(split_copy, first, _chunk_segment(split_copy, first, 0, 0, first["length"] - 10))
    _replace_segment(split_copy, second, None)  # the longer chunk 1 goes into a pack of its own
    last = len(manifest_of(split_copy)["shards"]) - 1
    packs = read_segments(split_copy, last)
    packs.append([_chunk_segment(split_copy, second, 1, second["chunk_start"] - 10, second["length"] + 10)])
    write_segments(split_copy, last, packs)
    rewrite_seam(split_copy, lambda rows: rows[g[1]].update(chunk_start=second["chunk_start"] - 10))
    follow_packs(split_copy)
    reseal(split_copy, recount_counts=True)
    report = caught(split_copy, "plan", "length is 502")
    caught(split_copy, "plan", f"chunk_start is {second['chunk_start'] - 10}")
    assert report["ok"] is False


def test_the_self_tests_overlong_fault_on_a_split_artifact(packed_split, tmp_path):
    """--self-test's overlong-policy fault on a split artifact: a split example's later chunks taken out and its
    first chunk called truncated (split keeps what truncation loses)."""
    from packcli.verify.faults import FAULTS, prepare_workspace

    fault = next(f for f in FAULTS if f.name == "overlong-policy")
    copy = prepare_workspace(packed_split, tmp_path)
    fault.apply(copy, tmp_path)
    caught(copy, "plan", "it must be split")


# --- the folder is a closed set: what load_dataset(OUT) reads is what verify checks ---

REDIRECT = """configs:
- config_name: default
  data_files:
  - split: train
    path: "{path}"
{extra}"""


def _poisoned_copy(d: Path) -> Path:
    """A Parquet file of the shards' schema whose first pack supervises every token (what a redirect points at)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(d / "shard-00000.parquet").to_pylist()
    rows[0]["labels"] = list(rows[0]["input_ids"])
    target = d / "data" / "train.parquet"
    target.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(d / "shard-00000.parquet")), target)
    return target


@pytest.mark.parametrize(("make", "name", "phrase"), [
    (lambda d: (d / ".huggingface.yaml").write_text(REDIRECT.format(path="data/*.parquet", extra="")) and
     _poisoned_copy(d), ".huggingface.yaml", "datasets.load_dataset reads it as the dataset card's YAML"),
    (lambda d: (d / ".huggingface.yaml").write_text(REDIRECT.format(
        path="shard-*.parquet", extra="  columns: [input_ids, seq_lengths]\n")), ".huggingface.yaml", "remove it"),
    (lambda d: (d / ".huggingface.yaml").write_text(REDIRECT.format(
        path="shard-*.parquet", extra="  filters: [[num_tokens, '>', 1000]]\n")), ".huggingface.yaml", "remove it"),
    (lambda d: (d / "shard-00099.parquet").write_bytes((d / "shard-00000.parquet").read_bytes()), "shard-00099.parquet",
     "the manifest does not list it"),
    (lambda d: _poisoned_copy(d), "data", "(a folder) is not part of the artifact"),
], ids=["yaml-redirect", "yaml-columns-without-labels", "yaml-filters", "extra-shard", "data-folder"])
def test_a_file_the_manifest_does_not_list(make, name, phrase, packed_copy):
    """Nothing pinned is touched: every hash still holds, and load_dataset(OUT) would read something else."""
    make(packed_copy)
    report = caught(packed_copy, "integrity", phrase, "--no-reconstruct")
    messages = [v["message"] for c in report["checks"] for v in c["violations"]]
    assert any(m.startswith(name) for m in messages), messages


def test_a_pinned_file_replaced_by_a_symlink(packed_copy, tmp_path):
    """The link points at identical bytes today: verify passes them, then the target can change."""
    elsewhere = tmp_path / "elsewhere.parquet"
    (packed_copy / "shard-00001.parquet").rename(elsewhere)
    (packed_copy / "shard-00001.parquet").symlink_to(elsewhere)
    caught(packed_copy, "integrity", "shard-00001.parquet is a symbolic link, not a regular file", "--no-reconstruct")


def test_the_cards_yaml_is_the_pinned_one(packed_copy):
    """The card's configs widened to every Parquet file (the seam table too), its sha256 re-pinned."""
    card = packed_copy / "README.md"
    card.write_text(card.read_text().replace('path: "shard-*.parquet"', 'path: "*.parquet"'))
    edit_manifest(packed_copy, lambda m: m["dataset_card"].update(bytes=card.stat().st_size,
                                                                   sha256=file_sha256(card)))
    caught(packed_copy, "integrity", "is not the card this manifest renders", "--no-reconstruct")


def test_the_loader_refuses_a_folder_with_strangers(packed_copy):
    from packcli.data import PackReader
    from packcli.errors import ContractError

    (packed_copy / ".huggingface.yaml").write_text(REDIRECT.format(path="data/*.parquet", extra=""))
    with pytest.raises(ContractError, match=r"\.huggingface\.yaml \(a file\) is not part of the artifact"):
        PackReader(packed_copy)


# --- the plan comes from the inputs' own order, never from the table under test ---


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


# --- every hashed field proved, provenance too ---


def test_a_reject_re_encoded_with_a_duplicate_key(packed_copy):
    """The same parsed object, other bytes: a reader that keeps the first key sees another reason."""
    path = packed_copy / "rejects.jsonl"
    lines = path.read_text(encoding="utf-8").split("\n")
    first = json.loads(lines[0])
    lines[0] = json.dumps(first)[:-1] + ', "reason": ' + json.dumps(first["reason"]) + "}"
    lines[0] = lines[0].replace('"reason": ' + json.dumps(first["reason"]), '"reason": "looked fine to me"', 1)
    assert json.loads(lines[0]) == first
    path.write_text("\n".join(lines), encoding="utf-8")
    reseal(packed_copy)
    caught(packed_copy, "global", "rejects.jsonl line 1 is not what pack writes")


def test_an_input_renamed_everywhere(packed_copy):
    """inputs[].name, the seam table's source and rejects.jsonl renamed alike; the file is still found (provenance)."""
    k = next(k for k, e in enumerate(manifest_of(packed_copy)["inputs"]) if e["name"] == "text.jsonl")
    rewrite_seam(packed_copy, lambda rows: [r.update(source="texts.jsonl") for r in rows if r["input"] == k])
    forge.rewrite_rejects(packed_copy, lambda rows: [r.update(source="texts.jsonl") for r in rows if r["input"] == k])
    reseal(packed_copy, lambda m: m["inputs"][k].update(name="texts.jsonl"))
    caught(packed_copy, "reconstruction", f"inputs[{k}].name is 'texts.jsonl', but the source is text.jsonl")


def test_a_template_origin_renamed(corpus_files, tokenizer_dir, tmp_path):
    """A file template's origin renamed; the file is still found where pack read it (provenance) and hashes as pinned."""
    import shutil

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    template = tmp_path / "mine.jinja"
    shutil.copy(Path(forge.__file__).parent.parent / "templates" / "chatml.jinja", template)
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=tuple(corpus_files[:1]), tokenizer=str(tokenizer_dir), out=out, capacity=1024,
                           template=str(template)))
    assert manifest_of(out)["template"]["origin"] == "file:mine.jinja" and verify_artifact(out).ok
    clean = tmp_path / "clean"
    shutil.copytree(out, clean)
    reseal(out, lambda m: m["template"].update(origin="file:reviewed.jinja"))
    caught(out, "contract_drift", "template.origin is 'file:reviewed.jinja' (name None), but the template was read from")
    reseal(clean, lambda m: m["template"].update(name="tool_use"))
    report = caught(clean, "contract_drift", "(name 'tool_use'), but the template was read from")
    assert any(v["field"] == "template.name" for c in report["checks"] for v in c["violations"])


# --- what the template dropped, where the user allowed it ---


@pytest.fixture(scope="module")
def dropped_calls(tmp_path_factory, tokenizer_dir) -> Path:
    """Tool records under TRL's lfm2 training template, which never prints tool calls, packed with
    --allow-dropped-fields tool_calls."""
    from importlib import resources

    pytest.importorskip("trl")
    from chat_data import tool_conversations
    from conftest import write_jsonl

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    root = tmp_path_factory.mktemp("dropped")
    template = root / "lfm2_training.jinja"
    template.write_text((resources.files("trl") / "chat_templates" / "lfm2_training.jinja").read_text(), "utf-8")
    records = tool_conversations(12, reasoning=False) + [
        {"messages": [{"role": "user", "content": f"Q{k}?"}, {"role": "assistant", "content": f"A{k}."}]}
        for k in range(12)]
    for message in (m for r in records for m in r["messages"] if m.get("content") is None):
        message["content"] = ""
    out = root / "packed"
    pack_corpus(PackConfig(inputs=(str(write_jsonl(root / "tools.jsonl", records)),), tokenizer=str(tokenizer_dir),
                           out=out, capacity=2048, template=str(template), allow_dropped_fields=("tool_calls",)))
    assert verify_artifact(out).ok and manifest_of(out)["counts"]["dropped_fields"] == {"tool_calls": 12}
    return out


@pytest.fixture()
def dropped_copy(dropped_calls, tmp_path) -> Path:
    import shutil

    shutil.copytree(dropped_calls, tmp_path / "dropped")
    return tmp_path / "dropped"


def test_the_count_of_records_whose_calls_were_dropped_forged(dropped_copy):
    reseal(dropped_copy, lambda m: m["counts"]["dropped_fields"].update(tool_calls=0))
    caught(dropped_copy, "reconstruction", "counts.dropped_fields.tool_calls is 0, but re-rendering drops tool_calls "
                                           "from 12 records")


def test_the_permission_to_drop_calls_removed(dropped_copy):
    """Without config.allow_dropped_fields the same records are rejects: the packs hold what pack refuses."""
    def forge_it(m: dict) -> None:
        del m["config"]["allow_dropped_fields"]
        del m["counts"]["dropped_fields"]
    reseal(dropped_copy, forge_it)
    caught(dropped_copy, "reconstruction", "re-running gives rejection")
