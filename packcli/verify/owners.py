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

from dataclasses import dataclass

from packcli.artifact.fieldspec import (
    FIELD_SPECS,
    FieldSpec,
    entry_of,
    hashed_leaves,
    judged_leaves,
    missing_fields,
    pattern_of,
)
from packcli.choices import LossPolicy
from packcli.contract import CONVENTIONS
from packcli.verify.report import CheckResult, Violation

__all__ = ["MANIFEST_FIELDS", "SEAM_COLUMNS", "SHARD_COLUMNS", "Owner", "check_manifest", "hashed_leaves", "owner_of",
           "pattern_of"]


@dataclass(frozen=True)
class Owner:
    """The check that proves a field and what it is checked against; ``spec``: the field's types and range, from
    the artifact's one table (`packcli.artifact.fieldspec.FIELD_SPECS`), which verify judges by as every reader does."""

    check: str
    against: str
    spec: FieldSpec

    @property
    def optional(self) -> bool:
        """Written only when an option asks for it (an artifact without it lacks nothing)."""
        return self.spec.optional


def _owned(table: dict[str, tuple[str, str]]) -> dict[str, Owner]:
    """The owners, each with its field's spec: a path the artifact's table does not have fails here, at import
    (and a field of the table no check owns: tests/test_verify_owners.py)."""
    return {path: Owner(check, against, FIELD_SPECS[path]) for path, (check, against) in table.items()}


MANIFEST_FIELDS: dict[str, Owner] = _owned({
    "contract_version": ("manifest", "CONTRACT_VERSION: read_manifest refuses any other"),
    "conventions.*": ("manifest", "packcli.contract.CONVENTIONS, key for key"),
    "loss_policy": ("manifest", "a LossPolicy, equal to config.loss"),
    "config.loss": ("manifest", "equal to loss_policy (reconstruction renders with it)"),
    "config.input_format": ("reconstruction", "re-parsing every source line with it"),
    "config.template_date": ("reconstruction", "a date; re-rendering every record on it"),
    "config.fields": ("reconstruction", "the column mapping every record is re-read with"),
    "config.fields.*": ("reconstruction", "the column mapping every record is re-read with"),
    "config.text_bos": ("reconstruction", "auto, yes or no; every text record re-rendered with it"),
    "config.text_eos": ("reconstruction", "auto, yes or no; every text record re-rendered with it"),
    "config.dedupe": ("reconstruction", "none or exact; exact: every record's content key recomputed"),
    "config.allow_dropped_fields": ("reconstruction", "the fields every record is re-rendered allowing its template to drop"),
    "config.allow_dropped_fields[]": ("reconstruction", "an `allow_dropped_fields` field"),
    "counts.dropped_fields.*": ("reconstruction", "the records whose re-rendering drops each allowed field"),
    "config.mix": ("copies", "the copies of every record, drawn again"),
    "config.mix.*": ("copies", "the copies of every record, drawn again"),
    "config.capacity": ("plan", "the re-derived fates and plan; no pack above it"),
    "config.strategy": ("plan", "a strategy, re-run on the reconstructed lengths"),
    "config.window": ("plan", "the window the re-run plan used (None unless strategy=window)"),
    "config.seed": ("plan", "the re-run plan"),
    "config.shuffle": ("plan", "the re-run plan"),
    "config.shuffle_packs": ("plan", "the re-run plan"),
    "config.overlong": ("plan", "the fates re-derived from the reconstructed lengths"),
    "config.split_overlap": ("plan", "the chunks re-cut from every reconstructed over-long example"),
    "config.split_min_last": ("plan", "which re-cut chunks are kept"),
    "config.min_density": ("plan", "met by the re-run plan"),
    "config.max_displacement": ("plan", "met by the re-run plan"),
    "config.max_reject_fraction": ("plan", "met by the re-derived fates"),
    "config.packs_per_shard": ("plan", "how the re-run plan is cut into shards"),
    "metrics.*": ("plan", "the metrics of the re-run plan"),
    "tokenizer.sha256": ("contract_drift", "sha256 of the tokenizer found"),
    "tokenizer.bos_token": ("contract_drift", "the tokenizer's own bos_token"),
    "tokenizer.eos_token": ("contract_drift", "the tokenizer's own eos_token"),
    "template.origin": ("contract_drift", "the origin of the template found; the one there hashes as pinned"),
    "template.name": ("contract_drift", "which of the tokenizer's templates; it hashes as pinned"),
    "template.sha256": ("contract_drift", "sha256 of template.text and of the template found"),
    "template.text": ("contract_drift", "hashes to template.sha256"),
    "inputs[].name": ("reconstruction", "the name of the source found (global: the seam table's source)"),
    "inputs[].size": ("reconstruction", "the source's size in bytes"),
    "inputs[].sha256": ("reconstruction", "the source's sha256"),
    "inputs[].kind": ("reconstruction", "what the source reads as (jsonl, parquet, dataset)"),
    "inputs[].records": ("global", "seam-table rows of the input; reconstruction: records read"),
    "counts.*": ("global", "recounted from the seam table and the packs"),
    "shards[].name": ("integrity", "shard-00000.parquet, shard-00001.parquet, ... each once"),
    "shards[].rows": ("integrity", "rows in the shard"),
    "shards[].bytes": ("integrity", "the shard's size"),
    "shards[].sha256": ("integrity", "the shard's sha256"),
    "shards[].tokens": ("integrity", "tokens in the shard"),
    "shards[].supervised": ("integrity", "supervised labels in the shard"),
    "seam_table.name": ("integrity", "examples.parquet"),
    "seam_table.rows": ("integrity", "rows in the seam table"),
    "seam_table.bytes": ("integrity", "the seam table's size"),
    "seam_table.sha256": ("integrity", "the seam table's sha256"),
    "rejects.name": ("integrity", "rejects.jsonl"),
    "rejects.rows": ("integrity", "lines in rejects.jsonl"),
    "rejects.bytes": ("integrity", "the size of rejects.jsonl"),
    "rejects.sha256": ("integrity", "the sha256 of rejects.jsonl (its rows: global)"),
    "dataset_card.name": ("integrity", "README.md"),
    "dataset_card.bytes": ("integrity", "the card's size"),
    "dataset_card.sha256": ("integrity", "the card's sha256; the card is the one the manifest renders"),
})

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


def owner_of(path: str) -> Owner | None:
    """The owner of a concrete or pattern path (a ``.*`` entry owns its whole subtree)."""
    return entry_of(MANIFEST_FIELDS, path)


def check_manifest(manifest: dict, result: CheckResult) -> bool:
    """Every hashed field owned and of its type, every owned field present, the conventions the
    contract's, the loss policy stated once. Returns whether the manifest is whole enough for the
    checks that read it (a missing or mistyped field is reported here, not as a traceback there)."""
    whole = True
    for path, value, field, problem in judged_leaves(manifest):  # types and ranges: the artifact's table
        result.checked += 1
        if field is None:
            result.fail(Violation(f"hashed field {path} = {value!r} is not one this verify checks (an artifact "
                                  "of a newer packcli, or a field added without its check)", field=path))
        elif problem is not None:
            result.fail(Violation(problem, field=field))
            whole = False
        elif field != path:  # inside an object or a list where a value belongs (named at its first leaf)
            whole = False
    for path, pattern in missing_fields(manifest):
        result.fail(Violation(f"{path} is missing (its check: {MANIFEST_FIELDS[pattern].check})", field=path))
        whole = False
    conventions = manifest.get("conventions")
    for key in sorted(set(CONVENTIONS) | set(conventions)) if isinstance(conventions, dict) else ():
        if conventions.get(key) != CONVENTIONS.get(key):
            result.fail(Violation(f"conventions.{key} = {conventions.get(key)!r}, but the contract's is "
                                  f"{CONVENTIONS.get(key)!r}: a consumer following the manifest would misread "
                                  "every pack", field=f"conventions.{key}"))
    policy, config_loss = manifest.get("loss_policy"), (manifest.get("config") or {}).get("loss")
    if not isinstance(policy, str) or policy not in {p.value for p in LossPolicy}:  # a forged list is no key
        result.fail(Violation(f"loss_policy {policy!r} is not a loss policy", field="loss_policy"))
    if config_loss != policy:
        result.fail(Violation(f"config.loss {config_loss!r} and loss_policy {policy!r} disagree: the manifest "
                              "states the policy twice", field="config.loss"))
    return whole
