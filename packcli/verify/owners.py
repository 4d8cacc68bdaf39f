"""Who proves what: every hashed manifest field, seam-table column and shard column, and the check that owns it.

The manifest hash only says the manifest was not edited; a forger who re-seals it can write anything.
So every hashed field must be recomputed from the artifact and the sources, or checked against them,
by exactly one check, named here. A field with no owner is a claim nobody tests: ``verify`` reports
it (an artifact from a newer packcli, or a field added without its check), and
tests/test_verify_owners.py walks the manifest of a fresh pack, edits each field alone, re-seals, and
demands that the owner fails and names the field. A field verify cannot check (the library versions
that packed it) belongs in ``unhashed``, not here.

Paths: ``config.capacity``; ``[]`` for every element of a list (``inputs[].sha256``); a trailing
``.*`` for a subtree its owner recomputes whole, keys included (``counts.*``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from packcli.artifact.manifest import UNHASHED_KEYS
from packcli.checks import MAX_INT32, MAX_SEED
from packcli.choices import LossPolicy
from packcli.contract import CONVENTIONS
from packcli.verify.report import CheckResult, Violation


@dataclass(frozen=True)
class Owner:
    """The check that proves a field, the JSON types it may have, and what it is checked against; ``bounds``:
    the range of a number pack can write there (default: any int64, any finite float)."""

    check: str
    types: tuple[type, ...]
    against: str
    bounds: tuple[float, float] | None = None
    optional: bool = False  # written only when an option asks for it (an artifact without it lacks nothing)


INT64 = (-(2**63), 2**63 - 1)  # what a number must fit to be held (numpy, Arrow): any larger is forged


INT, STR, BOOL, NUMBER = (int,), (str,), (bool,), (int, float)
OPT_INT, OPT_STR, OPT_NUMBER = (int, type(None)), (str, type(None)), (int, float, type(None))

MANIFEST_FIELDS: dict[str, Owner] = {
    "contract_version": Owner("manifest", INT, "CONTRACT_VERSION: read_manifest refuses any other"),
    "conventions.*": Owner("manifest", (str, int), "packcli.contract.CONVENTIONS, key for key"),
    "loss_policy": Owner("manifest", STR, "a LossPolicy, equal to config.loss"),
    "config.loss": Owner("manifest", STR, "equal to loss_policy (reconstruction renders with it)"),
    "config.input_format": Owner("reconstruction", STR, "re-parsing every source line with it"),
    "config.template_date": Owner("reconstruction", STR, "a date; re-rendering every record on it"),
    "config.fields": Owner("reconstruction", (dict,), "the column mapping every record is re-read with"),
    "config.fields.*": Owner("reconstruction", STR, "the column mapping every record is re-read with"),
    "config.text_bos": Owner("reconstruction", STR, "auto, yes or no; every text record re-rendered with it"),
    "config.text_eos": Owner("reconstruction", STR, "auto, yes or no; every text record re-rendered with it"),
    "config.dedupe": Owner("reconstruction", STR, "none or exact; exact: every record's content key recomputed"),
    "config.allow_dropped_fields": Owner("reconstruction", (list,), "the fields every record is re-rendered "
                                         "allowing its template to drop", optional=True),
    "config.allow_dropped_fields[]": Owner("reconstruction", STR, "an `allow_dropped_fields` field", optional=True),
    "counts.dropped_fields.*": Owner("reconstruction", INT, "the records whose re-rendering drops each allowed field",
                                     optional=True),
    "config.mix": Owner("copies", (dict, type(None)), "the copies of every record, drawn again"),
    "config.mix.*": Owner("copies", (str, int, float), "the copies of every record, drawn again"),
    "config.capacity": Owner("plan", INT, "the re-derived fates and plan; no pack above it", (2, MAX_INT32)),
    "config.strategy": Owner("plan", STR, "a strategy, re-run on the reconstructed lengths"),
    "config.window": Owner("plan", OPT_INT, "the window the re-run plan used (None unless strategy=window)",
                           (1, MAX_INT32)),
    "config.seed": Owner("plan", INT, "the re-run plan", (0, MAX_SEED)),
    "config.shuffle": Owner("plan", BOOL, "the re-run plan"),
    "config.shuffle_packs": Owner("plan", BOOL, "the re-run plan"),
    "config.overlong": Owner("plan", STR, "the fates re-derived from the reconstructed lengths"),
    "config.split_overlap": Owner("plan", INT, "the chunks re-cut from every reconstructed over-long example",
                                  (0, MAX_INT32)),
    "config.split_min_last": Owner("plan", INT, "which re-cut chunks are kept", (1, MAX_INT32)),
    "config.min_density": Owner("plan", OPT_NUMBER, "met by the re-run plan", (0, 1)),
    "config.max_displacement": Owner("plan", OPT_NUMBER, "met by the re-run plan", (0, math.inf)),
    "config.max_reject_fraction": Owner("plan", NUMBER, "met by the re-derived fates", (0, 1)),
    "config.packs_per_shard": Owner("plan", INT, "how the re-run plan is cut into shards", (1, MAX_INT32)),
    "metrics.*": Owner("plan", NUMBER, "the metrics of the re-run plan"),
    "tokenizer.sha256": Owner("contract_drift", STR, "sha256 of the tokenizer found"),
    "tokenizer.bos_token": Owner("contract_drift", OPT_STR, "the tokenizer's own bos_token"),
    "tokenizer.eos_token": Owner("contract_drift", OPT_STR, "the tokenizer's own eos_token"),
    "template.origin": Owner("contract_drift", STR, "the origin of the template found; the one there hashes as pinned"),
    "template.name": Owner("contract_drift", OPT_STR, "which of the tokenizer's templates; it hashes as pinned"),
    "template.sha256": Owner("contract_drift", STR, "sha256 of template.text and of the template found"),
    "template.text": Owner("contract_drift", STR, "hashes to template.sha256"),
    "inputs[].name": Owner("reconstruction", STR, "the name of the source found (global: the seam table's source)"),
    "inputs[].size": Owner("reconstruction", INT, "the source's size in bytes"),
    "inputs[].sha256": Owner("reconstruction", STR, "the source's sha256"),
    "inputs[].kind": Owner("reconstruction", STR, "what the source reads as (jsonl, parquet, dataset)"),
    "inputs[].records": Owner("global", INT, "seam-table rows of the input; reconstruction: records read"),
    "counts.*": Owner("global", INT, "recounted from the seam table and the packs"),
    "shards[].name": Owner("integrity", STR, "shard-00000.parquet, shard-00001.parquet, ... each once"),
    "shards[].rows": Owner("integrity", INT, "rows in the shard"),
    "shards[].bytes": Owner("integrity", INT, "the shard's size"),
    "shards[].sha256": Owner("integrity", STR, "the shard's sha256"),
    "shards[].tokens": Owner("integrity", INT, "tokens in the shard"),
    "shards[].supervised": Owner("integrity", INT, "supervised labels in the shard"),
    "seam_table.name": Owner("integrity", STR, "examples.parquet"),
    "seam_table.rows": Owner("integrity", INT, "rows in the seam table"),
    "seam_table.bytes": Owner("integrity", INT, "the seam table's size"),
    "seam_table.sha256": Owner("integrity", STR, "the seam table's sha256"),
    "rejects.name": Owner("integrity", STR, "rejects.jsonl"),
    "rejects.rows": Owner("integrity", INT, "lines in rejects.jsonl"),
    "rejects.bytes": Owner("integrity", INT, "the size of rejects.jsonl"),
    "rejects.sha256": Owner("integrity", STR, "the sha256 of rejects.jsonl (its rows: global)"),
    "dataset_card.name": Owner("integrity", STR, "README.md"),
    "dataset_card.bytes": Owner("integrity", INT, "the card's size"),
    "dataset_card.sha256": Owner("integrity", STR, "the card's sha256; the card is the one the manifest renders"),
}

SEAM_COLUMNS: dict[str, str] = {  # column -> the check that proves it
    "example_id": "global",  # the documented formula, unique
    "input": "global",  # an input of the manifest
    "source": "global",  # that input's name
    "line": "reconstruction",  # a record of that source; (input, line, copy) unique: global
    "copy": "copies",  # which copy of its record: the mixture's draw
    "chunk": "plan", "chunk_start": "plan",  # the chunks the re-derived cut gives (--overlong split)
    "status": "plan",  # the fate re-derived from the reconstructed length and the overlong policy
    "reason": "plan",  # the same, and for a rejected record the reason re-parsing gives (reconstruction)
    "shard": "plan", "row": "plan", "offset": "plan",  # where the re-run plan puts the example
    "length": "plan",  # tokens in the pack, re-derived from the reconstructed length
    "original_length": "reconstruction",  # the record's tokens, re-tokenized
    "supervised": "plan", "supervised_lost": "plan",  # re-derived from the reconstructed counts
    "token_hash": "global",  # the pack span's tokens (a dropped example's: reconstruction)
    "format": "reconstruction",  # the format the line is read as
}

SHARD_COLUMNS: dict[str, str] = {  # column -> the check that proves it
    "input_ids": "reconstruction", "labels": "reconstruction",  # a fresh tokenization of each record
    "position_ids": "pack_layout", "cu_seqlens": "pack_layout",  # the seams, three ways, agree
    "seq_lengths": "pack_layout",  # diff(cu_seqlens)
    "example_ids": "global",  # one segment per seam-table row and back
    "num_tokens": "pack_layout", "num_supervised": "pack_layout",  # recounted per row
}

_INDEX = re.compile(r"\[\d+\]")


def pattern_of(path: str) -> str:
    """``inputs[3].sha256`` -> ``inputs[].sha256``."""
    return _INDEX.sub("[]", path)


def owner_of(path: str) -> Owner | None:
    """The owner of a concrete or pattern path (a ``.*`` entry owns its whole subtree)."""
    pattern = pattern_of(path)
    if pattern in MANIFEST_FIELDS:
        return MANIFEST_FIELDS[pattern]
    head = pattern
    while "." in head:
        head = head.rsplit(".", 1)[0]
        if head + ".*" in MANIFEST_FIELDS:
            return MANIFEST_FIELDS[head + ".*"]
    return None


def hashed_leaves(manifest: dict) -> Iterator[tuple[str, object]]:
    """(path, value) of every leaf of the manifest's hashed part; lists give ``name[i]`` paths."""
    def walk(value: object, path: str) -> Iterator[tuple[str, object]]:
        if isinstance(value, dict) and value:
            for key in sorted(value):
                yield from walk(value[key], f"{path}.{key}" if path else str(key))
        elif isinstance(value, list) and value:
            for i, item in enumerate(value):
                yield from walk(item, f"{path}[{i}]")
        else:
            yield path, value

    yield from walk({k: v for k, v in manifest.items() if k not in UNHASHED_KEYS}, "")


def check_manifest(manifest: dict, result: CheckResult) -> bool:
    """Every hashed field owned and of its type, every owned field present, the conventions the
    contract's, the loss policy stated once. Returns whether the manifest is whole enough for the
    checks that read it (a missing or mistyped field is reported here, not as a traceback there)."""
    whole = True
    containers: set[str] = set()
    for path, value in hashed_leaves(manifest):
        result.checked += 1
        owner = owner_of(path)
        if owner is None and (above := _field_above(path)) is not None:
            if above not in containers:  # an object or a list where a field's value belongs
                containers.add(above)
                result.fail(Violation(f"{above} holds {path.removeprefix(above)}: it is not a "
                                      f"{' or '.join(t.__name__ for t in MANIFEST_FIELDS[pattern_of(above)].types)}",
                                      field=above))
            whole = False
        elif owner is None:
            result.fail(Violation(f"hashed field {path} = {value!r} is not one this verify checks (an artifact "
                                  "of a newer packcli, or a field added without its check)", field=path))
        elif not isinstance(value, owner.types) or (isinstance(value, bool) and bool not in owner.types):
            result.fail(Violation(f"{path} = {value!r} is not a {' or '.join(t.__name__ for t in owner.types)}",
                                  field=path))
            whole = False
        elif (problem := _out_of_bounds(value, owner)) is not None:
            result.fail(Violation(f"{path} = {value!r} {problem}: pack never writes it", field=path))
            whole = False
    for pattern, owner in MANIFEST_FIELDS.items():
        if owner.optional:
            continue  # its owner checks it is there exactly when its option is
        if pattern.endswith(".*"):  # a subtree its owner recomputes: it must be there to compare
            parent = pattern[:-2]
            missing = [] if parent in MANIFEST_FIELDS or isinstance(_at(manifest, parent), dict) else [parent]
        else:
            missing = list(_missing(manifest, pattern))
        for path in missing:
            result.fail(Violation(f"{path} is missing (its check: {owner.check})", field=path))
            whole = False
    conventions = manifest.get("conventions")
    for key in sorted(set(CONVENTIONS) | set(conventions)) if isinstance(conventions, dict) else ():
        if conventions.get(key) != CONVENTIONS.get(key):
            result.fail(Violation(f"conventions.{key} = {conventions.get(key)!r}, but the contract's is "
                                  f"{CONVENTIONS.get(key)!r}: a consumer following the manifest would misread "
                                  "every pack", field=f"conventions.{key}"))
    policy, config_loss = manifest.get("loss_policy"), (manifest.get("config") or {}).get("loss")
    if policy not in {p.value for p in LossPolicy}:
        result.fail(Violation(f"loss_policy {policy!r} is not a loss policy", field="loss_policy"))
    if config_loss != policy:
        result.fail(Violation(f"config.loss {config_loss!r} and loss_policy {policy!r} disagree: the manifest "
                              "states the policy twice", field="config.loss"))
    return whole


def _field_above(path: str) -> str | None:
    """The nearest enclosing path that is a field of its own (not a ``.*`` subtree), or None."""
    head = path
    while (cut := max(head.rfind("."), head.rfind("["))) > 0:
        head = head[:cut]
        if pattern_of(head) in MANIFEST_FIELDS:
            return head
    return None


def _out_of_bounds(value: object, owner: Owner) -> str | None:
    """Why a number is outside what pack writes there (None: it is not, or it is no number). Checked here, once,
    so that no later check meets a number its arithmetic cannot hold."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    low, high = owner.bounds or INT64
    if not low <= value <= high:
        return f"is outside {low:,}..{high:,}" if owner.bounds else "does not fit 64 bits"
    return None


def _at(manifest: dict, path: str) -> object:
    """The value at a dotted path (no list indices), or None."""
    value: object = manifest
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _missing(manifest: dict, pattern: str) -> Iterator[str]:
    """Concrete paths of ``pattern`` absent from the manifest (``[]`` over every element)."""
    def walk(value: object, parts: list[str], path: str) -> Iterator[str]:
        if not parts:
            return
        head, rest = parts[0], parts[1:]
        key, is_list = (head[:-2], True) if head.endswith("[]") else (head, False)
        here = f"{path}.{key}" if path else key
        if not isinstance(value, dict) or key not in value:
            yield here
            return
        if is_list:
            items = value[key]
            if not isinstance(items, list):
                yield here
                return
            for i, item in enumerate(items):
                yield from walk(item, rest, f"{here}[{i}]")
        else:
            yield from walk(value[key], rest, here)

    yield from walk(manifest, pattern.split("."), "")
