"""What a valid manifest field is: the JSON types it may hold, the range of a number pack writes there, and
whether every artifact has it. One table, `FIELD_SPECS`, for every reader:

* `packcli.artifact.manifest.problems` (stats, show, the loader): a mistyped or out-of-range field is a
  clean `ContractError` naming it, before any reader trips over it;
* verify's manifest check (`packcli.verify.owners.check_manifest`), which adds the check that proves each
  field (its owner table has the same paths: tests/test_verify_owners.py);
* `packcli.config.PackConfig` and `packcli.stats` bound the settings they take with `setting_bounds`, so
  "`capacity` must be from 2" is written once, here, and pack never writes what a reader refuses.

Paths: ``config.capacity``; ``[]`` for every element of a list (``inputs[].sha256``); a trailing
``.*`` for a subtree whose keys are its own (``counts.*``). A number out of range is judged here, once,
so that no later reader meets a number its arithmetic cannot hold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from packcli.contract import MAX_INT32, MAX_SEED

UNHASHED_KEYS = ("manifest_sha256", "unhashed")  # facts about the run, outside the hash and this table
INT64 = (-(2**63), 2**63 - 1)  # what a number must fit to be held (numpy, Arrow): any larger is forged


def _kinds(types: tuple[type, ...]) -> str:
    """``types`` as a message names them: "an int or NoneType", "a str"."""
    names = " or ".join(t.__name__ for t in types)
    return ("an " if names[0] in "aeiou" else "a ") + names


@dataclass(frozen=True)
class FieldSpec:
    """A field's JSON types and, for a number, the range pack can write there (default: any int64, any
    finite float); ``optional``: written only when an option asks for it (an artifact without it lacks nothing)."""

    types: tuple[type, ...]
    bounds: tuple[float, float] | None = None
    optional: bool = False

    def problem(self, path: str, value: object) -> str | None:
        """Why ``value`` cannot be this field at ``path`` (None: it can)."""
        if not isinstance(value, self.types) or (isinstance(value, bool) and bool not in self.types):
            return f"{path} = {value!r} is not {_kinds(self.types)}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"{path} = {value!r} is not a finite number: pack never writes it"
        low, high = self.bounds or INT64
        if not low <= value <= high:
            where = f"is outside {low:,}..{high:,}" if self.bounds else "does not fit 64 bits"
            return f"{path} = {value!r} {where}: pack never writes it"
        return None


INT, STR, BOOL, NUMBER = (int,), (str,), (bool,), (int, float)
OPT_INT, OPT_STR, OPT_NUMBER = (int, type(None)), (str, type(None)), (int, float, type(None))

FIELD_SPECS: dict[str, FieldSpec] = {
    "contract_version": FieldSpec(INT),
    "conventions.*": FieldSpec((str, int)),
    "loss_policy": FieldSpec(STR),
    "config.loss": FieldSpec(STR),
    "config.input_format": FieldSpec(STR),
    "config.template_date": FieldSpec(STR),
    "config.fields": FieldSpec((dict,)),
    "config.fields.*": FieldSpec(STR),
    "config.text_bos": FieldSpec(STR),
    "config.text_eos": FieldSpec(STR),
    "config.dedupe": FieldSpec(STR),
    "config.allow_dropped_fields": FieldSpec((list,), optional=True),
    "config.allow_dropped_fields[]": FieldSpec(STR, optional=True),
    "counts.dropped_fields.*": FieldSpec(INT, optional=True),
    "config.mix": FieldSpec((dict, type(None))),
    "config.mix.*": FieldSpec((str, int, float)),
    "config.capacity": FieldSpec(INT, (2, MAX_INT32)),  # 2: a pack of one token carries no label
    "config.strategy": FieldSpec(STR),
    "config.window": FieldSpec(OPT_INT, (1, MAX_INT32)),
    "config.seed": FieldSpec(INT, (0, MAX_SEED)),
    "config.shuffle": FieldSpec(BOOL),
    "config.shuffle_packs": FieldSpec(BOOL),
    "config.overlong": FieldSpec(STR),
    "config.split_overlap": FieldSpec(INT, (0, MAX_INT32)),
    "config.split_min_last": FieldSpec(INT, (1, MAX_INT32)),
    "config.min_density": FieldSpec(OPT_NUMBER, (0, 1)),
    "config.max_displacement": FieldSpec(OPT_NUMBER, (0, math.inf)),
    "config.max_reject_fraction": FieldSpec(NUMBER, (0, 1)),
    "config.packs_per_shard": FieldSpec(INT, (1, MAX_INT32)),
    "metrics.*": FieldSpec(NUMBER),
    "tokenizer.sha256": FieldSpec(STR),
    "tokenizer.bos_token": FieldSpec(OPT_STR),
    "tokenizer.eos_token": FieldSpec(OPT_STR),
    "template.origin": FieldSpec(STR),
    "template.name": FieldSpec(OPT_STR),
    "template.sha256": FieldSpec(STR),
    "template.text": FieldSpec(STR),
    "inputs[].name": FieldSpec(STR),
    "inputs[].size": FieldSpec(INT),
    "inputs[].sha256": FieldSpec(STR),
    "inputs[].kind": FieldSpec(STR),
    "inputs[].records": FieldSpec(INT),
    "counts.*": FieldSpec(INT),
    "shards[].name": FieldSpec(STR),
    "shards[].rows": FieldSpec(INT),
    "shards[].bytes": FieldSpec(INT),
    "shards[].sha256": FieldSpec(STR),
    "shards[].tokens": FieldSpec(INT),
    "shards[].supervised": FieldSpec(INT),
    "seam_table.name": FieldSpec(STR),
    "seam_table.rows": FieldSpec(INT),
    "seam_table.bytes": FieldSpec(INT),
    "seam_table.sha256": FieldSpec(STR),
    "rejects.name": FieldSpec(STR),
    "rejects.rows": FieldSpec(INT),
    "rejects.bytes": FieldSpec(INT),
    "rejects.sha256": FieldSpec(STR),
    "dataset_card.name": FieldSpec(STR),
    "dataset_card.bytes": FieldSpec(INT),
    "dataset_card.sha256": FieldSpec(STR),
}


def setting_bounds(name: str) -> tuple[float, float]:
    """The range a setting (`packcli.artifact.manifest.PackSettings`' ``name``) may take: what pack checks its
    options against and what every reader of the manifest accepts."""
    bounds = FIELD_SPECS[f"config.{name}"].bounds
    if bounds is None:
        raise KeyError(f"config.{name} has no bounds")
    return bounds


_INDEX = re.compile(r"\[\d+\]")
_Entry = TypeVar("_Entry")


def pattern_of(path: str) -> str:
    """``inputs[3].sha256`` -> ``inputs[].sha256``."""
    return _INDEX.sub("[]", path)


def entry_of(table: Mapping[str, _Entry], path: str) -> _Entry | None:
    """The entry of ``table`` (`FIELD_SPECS`, or a table with its paths) for a concrete or pattern path: a
    ``.*`` entry holds its whole subtree. None: the path is no field of it."""
    pattern = pattern_of(path)
    if pattern in table:
        return table[pattern]
    head = pattern
    while "." in head:
        head = head.rsplit(".", 1)[0]
        if head + ".*" in table:
            return table[head + ".*"]
    return None


def hashed_leaves(manifest: Mapping) -> Iterator[tuple[str, object]]:
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


def judged_leaves(manifest: Mapping) -> Iterator[tuple[str, object, str | None, str | None]]:
    """Every hashed leaf as (path, value, field, problem): ``field`` the field it is judged as (None: it is
    no field of the table, an unknown one), ``problem`` why it cannot be that field (None: it can, or it
    sits inside an object or list already named as the problem of its field)."""
    containers: set[str] = set()
    for path, value in hashed_leaves(manifest):
        spec = entry_of(FIELD_SPECS, path)
        if spec is None and (above := _field_above(path)) is not None:  # an object or a list where a value belongs
            problem = None
            if above not in containers:
                containers.add(above)
                types = FIELD_SPECS[pattern_of(above)].types
                problem = f"{above} holds {path.removeprefix(above)}: it is not {_kinds(types)}"
            yield path, value, above, problem
        elif spec is None:
            yield path, value, None, None
        else:
            yield path, value, path, spec.problem(path, value)


def value_problems(manifest: Mapping) -> list[str]:
    """Every field of the manifest's hashed part that is not of its type or range (unknown fields aside: a
    reader ignores them, verify reports them)."""
    return [problem for _, _, _, problem in judged_leaves(manifest) if problem is not None]


def missing_fields(manifest: Mapping) -> Iterator[tuple[str, str]]:
    """(path, pattern) of every field every artifact has (not ``optional``) that the manifest lacks."""
    for pattern, spec in FIELD_SPECS.items():
        if spec.optional:
            continue
        if pattern.endswith(".*"):  # a subtree of its own keys: it must be there to compare
            parent = pattern[:-2]
            missing = [] if parent in FIELD_SPECS or isinstance(_at(manifest, parent), dict) else [parent]
        else:
            missing = list(_missing(manifest, pattern))
        yield from ((path, pattern) for path in missing)


def _field_above(path: str) -> str | None:
    """The nearest enclosing path that is a field of its own (not a ``.*`` subtree), or None."""
    head = path
    while (cut := max(head.rfind("."), head.rfind("["))) > 0:
        head = head[:cut]
        if pattern_of(head) in FIELD_SPECS:
            return head
    return None


def _at(manifest: Mapping, path: str) -> object:
    """The value at a dotted path (no list indices), or None."""
    value: object = manifest
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _missing(manifest: Mapping, pattern: str) -> Iterator[str]:
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
