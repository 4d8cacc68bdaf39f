"""Negative controls: corrupt copies of an artifact and show that verify catches each fault.

A check that never sees the bad case proves nothing. Each fault below damages one thing. Faults
that edit a shard or the seam table re-seal the manifest (new shard hashes, new manifest hash), a
consistent forgery, so they must be caught by the semantic check named, not by a hash mismatch.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli.artifact import manifest as mf
from packcli.artifact.shards import SCHEMA, load_flat, read_parquet, write_shard
from packcli.contract import CARD_NAME, IGNORE_INDEX, MANIFEST_NAME, SEAM_TABLE_NAME, token_hash
from packcli.errors import InputError
from packcli.tokenizer.hub import TOKENIZER_FILES
from packcli.tokenizer.load import CHAT_TEMPLATE_DIR, CHAT_TEMPLATE_FILE, TOKENIZER_SOURCE
from packcli.verify import forge
from packcli.verify.locate import find_source, find_template_file, find_tokenizer
from packcli.verify.suite import verify_artifact


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    check: str  # the check that must catch it
    expect: str  # a phrase its message must contain
    apply: Callable[[Path, Path], dict]  # (artifact copy, workspace) -> extra verify kwargs


@dataclass(frozen=True)
class FaultResult:
    name: str
    description: str
    caught: bool
    check: str
    message: str
    applies: bool = True  # False: the artifact has nothing this fault can damage (``message`` says why)


def _reseal(directory: Path, edit: Callable[[dict], None] | None = None) -> None:
    forge.reseal(directory, edit)


def _rewrite_first_shard(directory: Path, mutate: Callable[[dict], None]) -> None:
    """Rewrite shard-00000 after ``mutate`` edits its flat arrays, then re-seal."""
    path = directory / "shard-00000.parquet"
    flat = load_flat(read_parquet(path), path.name)
    row = next(r for r in range(flat.rows) if len(flat.cu[r]) > 2)  # a pack with a seam
    arrays = {"ids": flat.ids.copy(), "labels": flat.labels.copy(), "positions": flat.positions.copy(),
              "cu": [c.copy() for c in flat.cu], "seq_lengths": [s.copy() for s in flat.seq_lengths],
              "row": row, "start": int(flat.row_offsets[row])}
    mutate(arrays)
    table = read_parquet(path)
    offsets = pa.array(flat.row_offsets.astype(np.int32))
    cu_off = np.concatenate([[0], np.cumsum([len(c) for c in arrays["cu"]])]).astype(np.int32)
    sl_off = np.concatenate([[0], np.cumsum([len(s) for s in arrays["seq_lengths"]])]).astype(np.int32)
    sup = [int(np.count_nonzero(arrays["labels"][flat.row_offsets[r]:flat.row_offsets[r + 1]] != IGNORE_INDEX))
           for r in range(flat.rows)]
    columns = {
        "labels": pa.ListArray.from_arrays(offsets, pa.array(arrays["labels"], pa.int32())),
        "position_ids": pa.ListArray.from_arrays(offsets, pa.array(arrays["positions"], pa.int32())),
        "cu_seqlens": pa.ListArray.from_arrays(pa.array(cu_off), pa.array(np.concatenate(arrays["cu"]).astype(np.int32),
                                                                          pa.int32())),
        "seq_lengths": pa.ListArray.from_arrays(pa.array(sl_off), pa.array(
            np.concatenate(arrays["seq_lengths"]).astype(np.int32), pa.int32())),
        "num_supervised": pa.array(sup, pa.int32()),
    }
    for name, column in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, column)
    write_shard(table.cast(SCHEMA), path)
    _reseal(directory)


def _seq_lengths_off(d: Path, ws: Path) -> dict:
    def mutate(a: dict) -> None:
        lengths = a["seq_lengths"][a["row"]]
        lengths[0] += 1  # TRL would cut the first seam one token late: the next example's first token leaks
        lengths[1] -= 1
    _rewrite_first_shard(d, mutate)
    return {}


def _card_edited(d: Path, ws: Path) -> dict:
    path = d / CARD_NAME
    path.write_text(path.read_text(encoding="utf-8").replace("max_length=None", "max_length=1024"), encoding="utf-8")
    return {}


def _yaml_beside_the_card(d: Path, ws: Path) -> dict:
    """What load_dataset(OUT) merges into the card's YAML: the train split narrowed to columns without labels."""
    (d / ".huggingface.yaml").write_text('configs:\n- config_name: default\n  data_files:\n  - split: train\n'
                                         '    path: "shard-*.parquet"\n  columns: [input_ids, seq_lengths]\n')
    return {}


def _seam_rows_replanned(d: Path, ws: Path) -> dict:
    forge.replan(d, lambda rows: rows[::-1])
    return {}


def _byte_flip(d: Path, ws: Path) -> dict:
    path = d / "shard-00000.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return {}


def _cu_shift(d: Path, ws: Path) -> dict:
    def mutate(a: dict) -> None:
        a["cu"][a["row"]][1] += 1
    _rewrite_first_shard(d, mutate)
    return {}


def _position_not_reset(d: Path, ws: Path) -> dict:
    def mutate(a: dict) -> None:
        cu, s = a["cu"][a["row"]], a["start"]
        a["positions"][s + cu[1]:s + cu[2]] += cu[1]  # example 1 continues example 0's positions
    _rewrite_first_shard(d, mutate)
    return {}


def _seam_label(d: Path, ws: Path) -> dict:
    def mutate(a: dict) -> None:
        t = a["start"] + a["cu"][a["row"]][1]
        a["labels"][t] = a["ids"][t]  # the previous example's last token would predict this one
    _rewrite_first_shard(d, mutate)
    return {}


def _label_masked(d: Path, ws: Path) -> dict:
    def mutate(a: dict) -> None:
        cu, s = a["cu"][a["row"]], a["start"]
        t = s + int(np.flatnonzero(a["labels"][s:s + cu[1]] != IGNORE_INDEX)[-1])
        a["labels"][t] = IGNORE_INDEX  # an assistant token silently loses its loss; its pack's count follows
    _rewrite_first_shard(d, mutate)
    return {}


def _duplicate(d: Path, ws: Path) -> dict:
    path = d / "shard-00000.parquet"
    table = read_parquet(path)
    write_shard(pa.concat_tables([table, table.slice(0, 1)]), path)
    _reseal(d, lambda m: m["counts"].update(packs=m["counts"]["packs"] + 1))
    return {}


def _dropped_without_record(d: Path, ws: Path) -> dict:
    first = pq.read_table(d / "shard-00000.parquet").slice(0, 1)
    gone = set(first["example_ids"][0].as_py())
    forge.rewrite_packs(d, 0, lambda rows: rows.pop(0))

    def edit_seam(rows: list[dict]) -> None:
        rows[:] = [r for r in rows if r["example_id"] not in gone]
        for r in rows:  # later rows of shard-00000 moved up by one: fix their row numbers so only the loss remains
            if r["shard"] == "shard-00000.parquet":
                r["row"] -= 1
    forge.rewrite_seam(d, edit_seam)
    forge.reseal(d, recount_counts=True)
    return {}


def _copy_claimed(d: Path, ws: Path) -> dict:
    """The seam table's first packed example renumbered as a second copy of its record."""
    seam = read_parquet(d / SEAM_TABLE_NAME)
    copy = seam["copy"].to_pylist()
    copy[seam["status"].to_pylist().index("packed")] = 1
    seam = seam.set_column(seam.schema.get_field_index("copy"), "copy", pa.array(copy, pa.int32()))
    pq.write_table(seam, d / SEAM_TABLE_NAME, compression="zstd", write_statistics=False)
    _reseal(d)
    return {}


def _tokenizer_swapped(d: Path, ws: Path) -> dict:
    path = ws / "tokenizer" / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]  # two ordinary tokens trade ids
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(data, ensure_ascii=False))
    return {}


def _template_edited(d: Path, ws: Path) -> dict:
    manifest = json.loads((d / MANIFEST_NAME).read_text())
    edited = ws / "edited.jinja"
    edited.write_text(manifest["template"]["text"].replace("<|im_start|>", "<|im_start|> ", 1) + " ")
    origin = manifest["template"]["origin"]
    if origin == TOKENIZER_SOURCE + "tokenizer_config.json":
        config_path = ws / "tokenizer" / "tokenizer_config.json"
        config = json.loads(config_path.read_text())
        name = manifest["template"].get("name") or "default"
        if isinstance(config["chat_template"], list):
            config["chat_template"] = [dict(t, template=edited.read_text()) if t["name"] == name else t
                                       for t in config["chat_template"]]
        else:
            config["chat_template"] = edited.read_text()
        config_path.write_text(json.dumps(config, ensure_ascii=False))
        return {}
    if origin.startswith(TOKENIZER_SOURCE):  # chat_template.jinja or additional_chat_templates/NAME.jinja
        shutil.copyfile(edited, ws / "tokenizer" / origin.removeprefix(TOKENIZER_SOURCE))
        return {}
    if origin.startswith("builtin:"):
        return {"template": str(edited)}  # the user points verify at their edited copy
    shutil.copyfile(edited, Path(manifest["unhashed"]["provenance"]["template"]))  # the workspace's copy
    return {}


def _manifest_edited(d: Path, ws: Path) -> dict:
    path = d / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["counts"]["packed"] += 1
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return {}


# The forgeries below re-seal everything a forger could recompute (forge.py): only the check that owns
# the fault can tell. They need an artifact with a pack holding two examples; the over-long ones need a
# truncated, dropped or split example and say they do not apply otherwise.


class NotApplicable(Exception):
    """The artifact has nothing this fault can damage (e.g. no over-long example)."""


def _seam_rows(d: Path) -> list[dict]:
    return pq.read_table(d / SEAM_TABLE_NAME).to_pylist()


def _line_repeated(d: Path, ws: Path) -> dict:
    """A made-up segment of supervised tokens, with a seam row that names a real, packed line again."""
    capacity = json.loads((d / MANIFEST_NAME).read_text())["config"]["capacity"]
    packs = forge.read_segments(d, 0)
    r = max(range(len(packs)), key=lambda q: capacity - sum(len(s.input_ids) for s in packs[q]))
    room = capacity - sum(len(s.input_ids) for s in packs[r])
    if room < 2:
        raise NotApplicable("no pack of shard-00000 has room for another segment")
    ids = [int(t) for t in packs[r][0].input_ids[:room]]
    packs[r].append(forge.Segment(2**62 + 1, ids, [IGNORE_INDEX] + ids[1:]))
    forge.write_segments(d, 0, packs)

    def add_row(rows: list[dict]) -> None:
        twin = next(i for i, row in enumerate(rows) if row["status"] == "packed")
        rows.insert(twin + 1, dict(rows[twin], example_id=2**62 + 1))
    forge.rewrite_seam(d, add_row)
    forge.follow_packs(d)
    forge.reseal(d, recount_counts=True)
    return {}


def _shard_listed_twice(d: Path, ws: Path) -> dict:
    forge.reseal(d, lambda m: m["shards"].append(dict(m["shards"][0])))
    return {}


def _ids_renumbered(d: Path, ws: Path) -> dict:
    for k in range(len(json.loads((d / MANIFEST_NAME).read_text())["shards"])):
        packs = forge.read_segments(d, k)
        forge.write_segments(d, k, [[forge.Segment(s.example_id ^ 1, s.input_ids, s.labels) for s in p] for p in packs])
    forge.rewrite_seam(d, lambda rows: [row.update(example_id=row["example_id"] ^ 1) for row in rows])
    forge.reseal(d, recount_counts=True)
    return {}


def _overlong_policy(d: Path, ws: Path) -> dict:
    """--overlong truncate: a truncated example taken out and called dropped; --overlong drop: a dropped
    one's first capacity tokens packed and called truncated; --overlong split: a split example's later
    chunks taken out and its first called truncated. Either way its supervised tokens move."""
    manifest = json.loads((d / MANIFEST_NAME).read_text())
    capacity, rows = manifest["config"]["capacity"], _seam_rows(d)
    if manifest["config"]["overlong"] == "split":
        return _split_cut_back(d, rows, capacity)
    wanted = "truncated" if manifest["config"]["overlong"] == "truncate" else "dropped"
    i = next((i for i, row in enumerate(rows) if row["status"] == wanted), None)
    if i is None:
        raise NotApplicable(f"no {wanted} example")
    row, full = rows[i], forge.fresh_example(d, rows[i]["input"], rows[i]["line"])
    if wanted == "truncated":
        k = int(row["shard"].removeprefix("shard-").removesuffix(".parquet"))
        packs = forge.read_segments(d, k)
        packs[row["row"]] = [s for s in packs[row["row"]] if s.example_id != row["example_id"]]
        forge.write_segments(d, k, packs)
        change = dict(status="dropped", shard=None, row=-1, offset=-1, length=0, supervised=0,
                      supervised_lost=full.supervised, token_hash=token_hash(full.input_ids),
                      reason=f"{len(full.input_ids)} tokens > capacity {capacity}; truncation would keep no "
                             "supervised tokens")
    else:
        last = len(manifest["shards"]) - 1
        packs = forge.read_segments(d, last)
        packs.append([forge.Segment(row["example_id"], full.input_ids[:capacity].tolist(),
                                    full.labels[:capacity].tolist())])
        forge.write_segments(d, last, packs)
        change = dict(status="truncated", reason=f"{len(full.input_ids)} tokens > capacity {capacity}; "
                                                 f"truncated to {capacity}")
    forge.rewrite_seam(d, lambda rows: rows[i].update(change))
    forge.follow_packs(d)
    forge.reseal(d, recount_counts=True)
    return {}


def _split_cut_back(d: Path, rows: list[dict], capacity: int) -> dict:
    """A split example whose chunk 0 is packed: its other chunks taken out of their packs and the seam table,
    chunk 0 called truncated."""
    i = next((i for i, row in enumerate(rows) if row["status"] == "split" and row["chunk"] == 0), None)
    if i is None:
        raise NotApplicable("no split example with its first chunk packed")
    later = [j for j in range(i + 1, len(rows)) if rows[j]["example_id"] == rows[i]["example_id"]
             and rows[j]["chunk"] > 0]
    for j in later:
        row = rows[j]
        if row["shard"] is not None:
            k = int(row["shard"].removeprefix("shard-").removesuffix(".parquet"))
            packs = forge.read_segments(d, k)
            packs[row["row"]] = [s for s in packs[row["row"]] if s.example_id != row["example_id"]]
            forge.write_segments(d, k, packs)

    def cut_back(rows: list[dict]) -> None:
        for j in reversed(later):
            rows.pop(j)
        rows[i].update(status="truncated", reason=f"{rows[i]['original_length']} tokens > capacity {capacity}; "
                                                  f"truncated to {capacity}")
    forge.rewrite_seam(d, cut_back)
    forge.follow_packs(d)
    forge.reseal(d, recount_counts=True)
    return {}


def _examples_swapped(d: Path, ws: Path) -> dict:
    packs = forge.read_segments(d, 0)
    r = next(q for q, p in enumerate(packs) if len(p) > 1)
    packs[r][0], packs[r][1] = packs[r][1], packs[r][0]
    forge.write_segments(d, 0, packs)
    forge.follow_packs(d)
    forge.reseal(d, recount_counts=True)
    return {}


def _conventions_shifted(d: Path, ws: Path) -> dict:
    forge.reseal(d, lambda m: m["conventions"].update(labels="shifted"))
    return {}


def _capacity_raised(d: Path, ws: Path) -> dict:
    forge.reseal(d, lambda m: m["config"].update(capacity=2 * m["config"]["capacity"]))
    return {}


def _rejects_edited(d: Path, ws: Path) -> dict:
    forge.rewrite_rejects(d, lambda rows: rows.append({"input": 0, "source": "x", "line": 10**6, "reason": "made up"}))
    forge.reseal(d)
    return {}


def _labels_short(d: Path, ws: Path) -> dict:
    forge.rewrite_packs(d, 0, lambda rows: rows[0]["labels"].pop())
    forge.reseal(d)
    return {}


def _cu_merged(d: Path, ws: Path) -> dict:
    """Two examples merged into one segment (its seq_lengths too); positions still restart at the seam."""
    def merge(rows: list[dict]) -> None:
        row = next(r for r in rows if len(r["cu_seqlens"]) > 2)
        del row["cu_seqlens"][1]
        del row["example_ids"][1]
        row["seq_lengths"][:2] = [row["seq_lengths"][0] + row["seq_lengths"][1]]
    forge.rewrite_packs(d, 0, merge)
    forge.reseal(d)
    return {}


FAULTS = (
    Fault("byte-flip", "one byte flipped in a shard", "integrity", "sha256 differs", _byte_flip),
    Fault("cu-shift", "a cu_seqlens entry shifted by one", "pack_layout", "disagree on a seam", _cu_shift),
    Fault("seq-lengths-off", "seq_lengths (TRL's seams) disagree with cu_seqlens", "pack_layout",
          "disagree with cu_seqlens", _seq_lengths_off),
    Fault("position-not-reset", "positions continue across a seam", "pack_layout", "position_ids not reset",
          _position_not_reset),
    Fault("seam-label", "the first label of an example left supervised", "pack_layout", "seam label supervised",
          _seam_label),
    Fault("label-masked", "a supervised label set to -100 (pack counts adjusted)", "reconstruction",
          "labels differ from a fresh tokenization", _label_masked),
    Fault("duplicate", "an example duplicated (a pack row repeated)", "global", "appears twice", _duplicate),
    Fault("dropped-without-record", "a pack and its examples removed, with no record", "reconstruction",
          "no seam-table row", _dropped_without_record),
    Fault("copy-claimed", "an example renumbered as another copy of its record", "copies", "has copies [1]",
          _copy_claimed),
    Fault("tokenizer-swapped", "the pinned tokenizer file replaced by a different one", "contract_drift",
          "tokenizer changed", _tokenizer_swapped),
    Fault("template-edited", "the chat template edited after packing", "contract_drift", "template changed",
          _template_edited),
    Fault("card-edited", "the dataset card's TRL settings edited", "integrity", "dataset card", _card_edited),
    Fault("yaml-beside-the-card", "a .huggingface.yaml that makes load_dataset drop the labels", "integrity",
          "is not part of the artifact", _yaml_beside_the_card),
    Fault("seam-rows-replanned", "the seam table reversed and the packs re-made for that order", "plan",
          "not in input order", _seam_rows_replanned),
    Fault("manifest-edited", "a count in manifest.json edited", "integrity", "manifest.json was edited",
          _manifest_edited),
    Fault("line-repeated", "a made-up supervised segment whose seam row repeats a real line", "global",
          "both name", _line_repeated),
    Fault("shard-listed-twice", "a shard listed twice in the manifest (a reader yields its packs twice)",
          "integrity", "listed twice", _shard_listed_twice),
    Fault("ids-renumbered", "every example id changed, in the packs and the seam table alike", "global",
          "is not the id of its input, line and copy", _ids_renumbered),
    Fault("overlong-policy", "a truncated example called dropped (a dropped one smuggled in as truncated, a split "
          "one cut back to truncated)",
          "plan", "it must be", _overlong_policy),
    Fault("examples-swapped", "two examples of a pack swapped, the seam table following", "plan",
          "not where the plan puts them", _examples_swapped),
    Fault("conventions-shifted", "the manifest's conventions say labels are shifted", "manifest",
          "conventions.labels", _conventions_shifted),
    Fault("capacity-raised", "config.capacity doubled in the manifest", "plan", "config.capacity", _capacity_raised),
    Fault("rejects-edited", "a made-up reject added to rejects.jsonl", "global", "rejects.jsonl line", _rejects_edited),
    Fault("labels-short", "a labels row one shorter than its input_ids", "integrity", "malformed row",
          _labels_short),
    Fault("cu-merged", "cu_seqlens merge two examples across a seam (positions still restart)", "pack_layout",
          "cu_seqlens merge examples across a seam", _cu_merged),
)


def prepare_workspace(artifact: Path, workspace: Path, *, source_root: Path | None = None) -> Path:
    """Copy the artifact and its tokenizer (and a template file) into ``workspace`` and re-point the
    manifest at the copies, so faults damage copies and never the user's files. Sources are only
    read, so they stay where they are."""
    manifest = mf.load_manifest(artifact)
    copy = workspace / "artifact"
    shutil.copytree(artifact, copy)
    tok_src = find_tokenizer(manifest, source_root)
    if tok_src is None or not tok_src.exists():
        raise InputError(f"tokenizer {tok_src or '(no path recorded)'}: not found; the self-test copies it",
                         "pass `source_root`")
    if tok_src.is_dir():  # the directory pack was given: its tokenizer.json(.gz)
        tok_src = next(tok_src / n for n in TOKENIZER_FILES if (tok_src / n).is_file())
    tok_dir = workspace / "tokenizer"
    tok_dir.mkdir()
    shutil.copyfile(tok_src, tok_dir / tok_src.name)
    for name in ("tokenizer_config.json", CHAT_TEMPLATE_FILE):
        if (tok_src.parent / name).is_file():
            shutil.copyfile(tok_src.parent / name, tok_dir / name)
    if (tok_src.parent / CHAT_TEMPLATE_DIR).is_dir():
        shutil.copytree(tok_src.parent / CHAT_TEMPLATE_DIR, tok_dir / CHAT_TEMPLATE_DIR)
    is_file = manifest.template.origin.startswith("file:")
    template_file = find_template_file(manifest, source_root) if is_file else None
    sources = [find_source(manifest, k, source_root) for k in range(len(manifest.inputs))]

    def edit(m: dict) -> None:  # provenance is unhashed: the copy's manifest hash stays the original's
        where = m["unhashed"]["provenance"]
        where["tokenizer"] = str(tok_dir / tok_src.name)
        where["inputs"] = [str(p.absolute()) if p is not None else None for p in sources]  # read, never written
        if template_file is not None:
            target = workspace / template_file.name  # its name is its origin (file:NAME), which verify proves
            shutil.copyfile(template_file, target)
            where["template"] = str(target)
    _reseal(copy, edit)
    return copy


def run_self_test(artifact: str | Path, workspace: str | Path, *, source_root: str | Path | None = None) -> list[FaultResult]:
    """Verify a clean copy (must pass), then each fault on a fresh copy (each must be caught)."""
    artifact, workspace = Path(artifact), Path(workspace)
    root = Path(source_root) if source_root else None
    results = []
    baseline = verify_artifact(prepare_workspace(artifact, workspace / "baseline", source_root=root), source_root=root)
    results.append(FaultResult("clean-copy", "an untouched copy must pass", baseline.ok, "all",
                               "; ".join(v.message for c in baseline.checks for v in c.violations) or "passes"))
    for fault in FAULTS:
        ws = workspace / fault.name
        copy = prepare_workspace(artifact, ws, source_root=root)
        try:
            kwargs = fault.apply(copy, ws)
        except NotApplicable as why:
            results.append(FaultResult(fault.name, fault.description, False, fault.check, str(why), applies=False))
            continue
        report = verify_artifact(copy, source_root=root, **kwargs)
        check = next(c for c in report.checks if c.name == fault.check)
        messages = [v.message for v in check.violations]
        caught = not report.ok and any(fault.expect in msg for msg in messages)
        shown = next((m for m in messages if fault.expect in m), messages[0] if messages else "not caught")
        results.append(FaultResult(fault.name, fault.description, caught, fault.check, shown))
    return results
