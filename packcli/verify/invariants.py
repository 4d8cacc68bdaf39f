"""Structural invariants of an artifact, checked from the artifact alone.

Integrity (hashes, schema), contract drift (tokenizer and template still hash as pinned), the
per-pack layout (seams, positions, first labels, supervised labels) and the global bookkeeping
(every example exactly once, counts add up). Each check reports where it broke, never just "bad".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from packcli import manifest as mf
from packcli.chat import load_template
from packcli.errors import InputError
from packcli.shards import SCHEMA, file_sha256
from packcli.tokenization import IGNORE_INDEX, LoadedTokenizer, load_tokenizer, token_hash
from packcli.verify.report import CheckResult, Violation

PACKED_STATUSES = ("packed", "truncated")


@dataclass(frozen=True)
class FlatShard:
    """A shard's list columns as flat numpy arrays with row offsets: cheap random access."""

    name: str
    ids: npt.NDArray[np.int32]
    labels: npt.NDArray[np.int32]
    positions: npt.NDArray[np.int32]
    row_offsets: npt.NDArray[np.int64]
    cu: list[npt.NDArray[np.int32]]
    example_ids: list[npt.NDArray[np.int64]]
    num_tokens: npt.NDArray[np.int32]
    num_supervised: npt.NDArray[np.int32]

    @property
    def rows(self) -> int:
        return len(self.row_offsets) - 1


def _flat(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    array = column.combine_chunks()
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.to_numpy()
    return values[offsets[0]:offsets[-1]], offsets - offsets[0]


def load_flat(table: pa.Table, name: str) -> FlatShard:
    ids, offsets = _flat(table["input_ids"])
    labels, l_off = _flat(table["labels"])
    positions, p_off = _flat(table["position_ids"])
    cu_vals, cu_off = _flat(table["cu_seqlens"])
    ex_vals, ex_off = _flat(table["example_ids"])
    if not (np.array_equal(offsets, l_off) and np.array_equal(offsets, p_off)):
        raise ValueError("input_ids, labels and position_ids rows differ in length")
    return FlatShard(
        name=name, ids=ids, labels=labels, positions=positions, row_offsets=offsets,
        cu=[cu_vals[cu_off[r]:cu_off[r + 1]] for r in range(len(cu_off) - 1)],
        example_ids=[ex_vals[ex_off[r]:ex_off[r + 1]] for r in range(len(ex_off) - 1)],
        num_tokens=table["num_tokens"].to_numpy(), num_supervised=table["num_supervised"].to_numpy(),
    )


def check_integrity(directory: Path, manifest: dict, result: CheckResult) -> dict[str, FlatShard]:
    """Manifest hash, every shard's bytes/sha256/rows/schema, the seam table's hash, no stray shards."""
    if mf.manifest_hash(manifest) != manifest.get("manifest_sha256"):
        result.fail(Violation("manifest.json was edited: its content no longer matches manifest_sha256"))
    shards: dict[str, FlatShard] = {}
    listed = set()
    for info in manifest["shards"]:
        result.checked += 1
        name = info["name"]
        listed.add(name)
        path = directory / name
        if not path.is_file():
            result.fail(Violation("shard listed in the manifest is missing", shard=name))
            continue
        if path.stat().st_size != info["bytes"]:
            result.fail(Violation(f"shard size {path.stat().st_size} != manifest {info['bytes']}", shard=name))
        if file_sha256(path) != info["sha256"]:
            result.fail(Violation("shard sha256 differs from the manifest (corrupted or modified)", shard=name))
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            result.fail(Violation(f"shard unreadable: {exc}", shard=name))
            continue
        if not table.schema.equals(SCHEMA):
            result.fail(Violation(f"schema differs from the contract: {table.schema}", shard=name))
            continue
        if len(table) != info["rows"]:
            result.fail(Violation(f"{len(table)} rows != manifest {info['rows']}", shard=name))
        shards[name] = load_flat(table, name)
    for stray in sorted(p.name for p in directory.glob("shard-*.parquet") if p.name not in listed):
        result.fail(Violation("shard not listed in the manifest", shard=stray))
    seam = directory / manifest["seam_table"]["name"]
    if not seam.is_file() or file_sha256(seam) != manifest["seam_table"]["sha256"]:
        result.fail(Violation(f"{seam.name} missing or its sha256 differs from the manifest"))
    return shards


def resolve(path: str, source_root: Path | None) -> Path:
    p = Path(path)
    return source_root / p if source_root is not None and not p.is_absolute() else p


def check_drift(manifest: dict, result: CheckResult, *, tokenizer: str | None, template: str | None,
                source_root: Path | None, require_tokenizer: bool) -> tuple[LoadedTokenizer | None, str | None]:
    """Tokenizer and template must hash as the manifest pins them.

    Returns the loaded tokenizer and the template text when they match (reconstruction needs both),
    else None for the one that drifted or could not be found.
    """
    pinned_tok, pinned_tpl = manifest["tokenizer"], manifest["template"]
    tok_path = Path(tokenizer) if tokenizer else resolve(pinned_tok["source"], source_root)
    loaded = None
    result.checked += 1
    if tok_path.exists():
        loaded = load_tokenizer(tok_path, backend="hf")  # the reference, always: a fast-path error cannot pass
        if loaded.sha256 != pinned_tok["sha256"]:
            result.fail(Violation(f"tokenizer changed: {tok_path} has sha256 {loaded.sha256[:16]}, "
                                  f"the manifest pins {pinned_tok['sha256'][:16]}"))
            loaded = None
    elif tokenizer or require_tokenizer:
        raise InputError(f"tokenizer {tok_path}: not found (reconstruction re-tokenizes with it)",
                         "pass --tokenizer, or --no-reconstruct to check the structure only")
    text = pinned_tpl["text"]
    result.checked += 1
    if hashlib.sha256(text.encode()).hexdigest() != pinned_tpl["sha256"]:
        result.fail(Violation("template text in the manifest does not match its sha256"))
        text = None
    current = _current_template(pinned_tpl["source"], template, tok_path, source_root)
    if current is not None and hashlib.sha256(current.encode()).hexdigest() != pinned_tpl["sha256"]:
        where = template or pinned_tpl["source"]
        result.fail(Violation(f"template changed: {where} no longer hashes to the pinned "
                              f"{pinned_tpl['sha256'][:16]}"))
        text = None
    return loaded, text


def _current_template(source: str, override: str | None, tok_path: Path, source_root: Path | None) -> str | None:
    """The template text as it is now, where the manifest says it came from (None if not found)."""
    if override:
        return load_template(override).text
    if source == "builtin:chatml":
        return resources.files("packcli").joinpath("templates/chatml.jinja").read_text(encoding="utf-8")
    if source == "tokenizer_config.json":
        config_path = (tok_path if tok_path.is_dir() else tok_path.parent) / "tokenizer_config.json"
        if config_path.is_file():
            return load_template(str(config_path)).text
        return None
    path = resolve(source, source_root)
    if path.is_file():
        return load_template(str(path)).text
    return None


def check_packs(shards: dict[str, FlatShard], capacity: int, result: CheckResult) -> None:
    """Per pack: cu_seqlens well-formed; positions reset at every seam; first labels ignored;
    every supervised label equals its token; stored counts match."""
    for shard in shards.values():
        for r in range(shard.rows):
            result.checked += 1
            a, b = shard.row_offsets[r], shard.row_offsets[r + 1]
            ids, labels, pos, cu = shard.ids[a:b], shard.labels[a:b], shard.positions[a:b], shard.cu[r]
            n = b - a
            bad = _check_cu(cu, n, capacity, len(shard.example_ids[r]))
            if bad:
                result.fail(Violation(f"cu_seqlens {bad}", shard=shard.name, row=r))
                continue
            lengths = np.diff(cu)
            expected = np.arange(n) - np.repeat(cu[:-1].astype(np.int64), lengths)
            wrong = np.flatnonzero(pos != expected)
            if len(wrong):
                t = int(wrong[0])
                k = int(np.searchsorted(cu, t, side="right") - 1)
                result.fail(Violation(f"position_ids not reset: token {t} (example {k} of the pack) has position "
                                      f"{pos[t]}, expected {expected[t]}", shard=shard.name, row=r,
                                      example_id=int(shard.example_ids[r][k])))
            leaking = np.flatnonzero(labels[cu[:-1]] != IGNORE_INDEX)
            if len(leaking):
                k = int(leaking[0])
                result.fail(Violation(f"seam label supervised: the first label of example {k} of the pack is "
                                      f"{labels[cu[k]]}, not {IGNORE_INDEX} (the previous example would predict it)",
                                      shard=shard.name, row=r, example_id=int(shard.example_ids[r][k])))
            sup = labels != IGNORE_INDEX
            mismatch = np.flatnonzero(sup & (labels != ids))
            if len(mismatch):
                t = int(mismatch[0])
                result.fail(Violation(f"label {labels[t]} at token {t} differs from its token {ids[t]}",
                                      shard=shard.name, row=r))
            if shard.num_tokens[r] != n or shard.num_supervised[r] != int(sup.sum()):
                result.fail(Violation(f"counts: num_tokens {shard.num_tokens[r]} / num_supervised "
                                      f"{shard.num_supervised[r]}, actual {n} / {int(sup.sum())}",
                                      shard=shard.name, row=r))


def _check_cu(cu: np.ndarray, n: int, capacity: int, num_examples: int) -> str | None:
    if len(cu) < 2 or cu[0] != 0:
        return f"must start at 0 and name at least one example, got {cu[:4].tolist()}"
    if np.any(np.diff(cu) <= 0):
        return f"must strictly increase, got {cu.tolist()[:12]}"
    if cu[-1] != n:
        return f"ends at {cu[-1]}, but the pack has {n} tokens"
    if n > capacity:
        return f"pack has {n} tokens > capacity {capacity}"
    if len(cu) - 1 != num_examples:
        return f"names {len(cu) - 1} examples but example_ids has {num_examples}"
    return None


def check_global(shards: dict[str, FlatShard], seam: pa.Table, manifest: dict, result: CheckResult) -> None:
    """Every example exactly once, consistent with the seam table; counts equal the manifest's."""
    located: dict[int, tuple[str, int, int, int]] = {}
    for shard in shards.values():
        for r in range(shard.rows):
            cu = shard.cu[r]
            for k, eid in enumerate(shard.example_ids[r].tolist()):
                result.checked += 1
                if eid in located:
                    result.fail(Violation(f"example appears twice (also in {located[eid][0]} row {located[eid][1]})",
                                          shard=shard.name, row=r, example_id=eid))
                    continue
                if k + 1 < len(cu):
                    located[eid] = (shard.name, r, int(cu[k]), int(cu[k + 1] - cu[k]))
    rows = seam.to_pydict()
    counts = {s: 0 for s in ("packed", "truncated", "dropped", "rejected")}
    seen = set()
    tokens = supervised = 0
    for i, eid in enumerate(rows["example_id"]):
        status = rows["status"][i]
        counts[status] = counts.get(status, 0) + 1
        if eid in seen:
            result.fail(Violation("example appears twice in the seam table", example_id=eid,
                                  source=rows["source"][i], line=rows["line"][i]))
        seen.add(eid)
        if status not in PACKED_STATUSES:
            if eid in located:
                result.fail(Violation(f"example is {status} in the seam table but present in a pack", example_id=eid))
            continue
        where = located.pop(eid, None)
        expected = (rows["shard"][i], rows["row"][i], rows["offset"][i], rows["length"][i])
        if where != expected:
            result.fail(Violation(f"seam table says {expected}, the packs say {where}", example_id=eid,
                                  source=rows["source"][i], line=rows["line"][i]))
            continue
        shard = shards[where[0]]
        a = shard.row_offsets[where[1]] + where[2]
        span = shard.ids[a:a + where[3]]
        tokens += len(span)
        supervised += int(np.count_nonzero(shard.labels[a:a + where[3]] != IGNORE_INDEX))
        if token_hash(span) != rows["token_hash"][i]:
            result.fail(Violation("tokens in the pack do not hash to the seam table's token_hash", example_id=eid,
                                  shard=where[0], row=where[1], source=rows["source"][i], line=rows["line"][i]))
    for eid, (name, r, _, _) in located.items():
        result.fail(Violation("example in a pack has no packed row in the seam table", shard=name, row=r, example_id=eid))
    mc = manifest["counts"]
    actual = dict(counts, records=len(rows["example_id"]), tokens=tokens, supervised_tokens=supervised,
                  packs=sum(s.rows for s in shards.values()))
    for key, value in actual.items():
        if mc.get(key) != value:
            result.fail(Violation(f"count {key}: manifest says {mc.get(key)}, the artifact has {value}"))
    if sum(counts.values()) != mc.get("records"):
        result.fail(Violation(f"packed + truncated + dropped + rejected = {sum(counts.values())} != "
                              f"{mc.get('records')} input records"))
