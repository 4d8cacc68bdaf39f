"""Checks of what a user passes (numbers, input paths, output paths), made before any work starts.

Each function returns the problems it finds as one-line strings that name the option, the value and
what is allowed, so a command can collect every problem and report them all at once (`raise_all`).
They read the filesystem (does it exist, can it be written) but never write to it: a failed check
leaves nothing behind.
"""

from __future__ import annotations

import glob
import math
import numbers
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from packcli.errors import PackcliError

MAX_INT32 = 2**31 - 1  # token counts, offsets and line numbers are int32 in the artifact
MAX_SEED = 2**63 - 1  # a seed a reader of the manifest can hold in an int64
INPUT_SUFFIXES = (".jsonl", ".json", ".ndjson")
TABLE_SUFFIXES = (".parquet", ".arrow")
COMPRESSED_SUFFIXES = ("", ".gz", ".zst")
CSV_NAMES = (".csv", ".tsv", ".csv.gz", ".tsv.gz")
CSV_FIX = ("packcli reads JSON Lines, JSON arrays, Parquet and datasets tables: convert it first, e.g. "
           "datasets.load_dataset('csv', data_files='{path}')['train'].save_to_disk(DIR), then pass DIR")


def int_problems(flag: str, value: int | None, low: int, high: int = MAX_INT32) -> list[str]:
    """``value`` must be an int in ``low..high`` (None: not given, nothing to check)."""
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        return [f"{flag} must be an integer from {low:,} to {high:,}, got {value!r}"]
    return []


def float_problems(flag: str, value: float | None, low: float, high: float = math.inf, *,
                   low_open: bool = False) -> list[str]:
    """``value`` must be a finite number in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not (low < value if low_open else low <= value) or not value <= high:
        allowed = (f"in {'(' if low_open else '['}{low:g}, {high:g}]" if math.isfinite(high)
                   else f"{'>' if low_open else '>='} {low:g}")
        return [f"{flag} must be a finite number {allowed}, got {value!r}"]
    return []


def input_problems(patterns: Sequence[str | Path]) -> list[str]:
    """Every input names at least one readable input (a JSONL file or a JSON array, plain, .gz or .zst;
    a Parquet or ``datasets`` Arrow file; a ``datasets`` directory); a glob must match one. A CSV, or
    a JSON Lines name over a file that is not JSON Lines, is named for what it is. An ``hf:`` name is
    looked up in the local cache when the sources are resolved (`packcli.ingest.expand_inputs`)."""
    from packcli.ingest.sources import HUB_PREFIX, is_dataset_dir

    problems = []
    for pattern in patterns:
        text = str(pattern)
        if text.startswith(HUB_PREFIX):
            continue
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        if not matches:
            problems.append(f"{text}: no file matches")
        for match in matches:
            path = Path(match)
            if not path.exists():
                problems.append(f"{path}: no such file")
            elif path.is_dir():
                if not is_dataset_dir(path):
                    problems.append(f"{path}: is a directory; pass the files inside it, e.g. '{path}/*.jsonl', "
                                    "or a datasets.save_to_disk directory")
            elif path.name.lower().endswith(CSV_NAMES):
                problems.append(f"{path}: a CSV file; {CSV_FIX.format(path=path)}")
            elif not is_input_name(path.name):
                problems.append(f"{path}: not an input file name ({', '.join(input_names())})")
            elif not os.access(path, os.R_OK):
                problems.append(f"{path}: not readable")
            else:
                problems += layout_problems(path)
    return problems


def layout_problems(path: Path) -> list[str]:
    """A JSON Lines name over a file that holds one JSON array or CSV: say which it is, and the fix."""
    from packcli.errors import InputError
    from packcli.ingest.jsonarray import Layout, sniff_layout
    from packcli.ingest.sources import JSON_NAMES

    if path.name.lower().endswith(TABLE_SUFFIXES):
        return []
    try:
        layout, header = sniff_layout(path)
    except InputError as exc:
        return [exc.message]
    if layout is Layout.csv:
        return [f"{path}: holds CSV (header: {header}), not JSON; {CSV_FIX.format(path=path)}"]
    if layout is Layout.array and not path.name.lower().endswith(JSON_NAMES):
        return [f"{path}: holds one JSON array, not JSON Lines (one object per line); name it .json to read its "
                "elements as records"]
    return []


def is_input_name(name: str) -> bool:
    return name.lower().endswith(tuple(input_names()))


def input_names() -> list[str]:
    """The file name endings packcli reads: JSONL (plain or compressed), Parquet, Arrow."""
    return [s + c for s in INPUT_SUFFIXES for c in COMPRESSED_SUFFIXES] + list(TABLE_SUFFIXES)


def tokenizer_problems(flag: str, path: str | Path | None) -> list[str]:
    """A tokenizer.json(.gz) file, a directory holding one, or a Hub name in the local cache
    (`packcli.tokenizer.hub`; a miss carries the command that fetches it)."""
    if path is None:
        return []
    from packcli.tokenizer.hub import resolve_tokenizer_path

    try:
        p = resolve_tokenizer_path(path)
    except PackcliError as exc:
        return [f"{flag} {exc.message.removeprefix('tokenizer ')}" + (f"; {exc.hint}" if exc.hint else "")]
    if p.is_dir():
        if not any((p / name).is_file() for name in ("tokenizer.json", "tokenizer.json.gz")):
            return [f"{flag} {p}: no tokenizer.json in this directory"]
        return []
    if not p.is_file():
        return [f"{flag} {p}: no such file or directory"]
    return []


def template_problems(spec: str | None, tokenizer: str | Path | None = None) -> list[str]:
    """``auto``, ``chatml``, a template file or tokenizer directory that exists, or the name of one of
    ``tokenizer``'s own templates (``tool_use``), as `packcli.chat.load_template` resolves it."""
    if spec is None or spec in ("auto", "chatml") or Path(spec).exists():
        return []
    from packcli.chat.training import TRL_PREFIX, trl_template

    if spec.startswith(TRL_PREFIX):
        try:
            trl_template(spec)
        except PackcliError as exc:
            return [f"{exc.message} ({exc.hint})"]
        return []
    names: list[str] = []
    tokenizer = _tokenizer_path(tokenizer)
    if tokenizer is not None and tokenizer.exists():
        from packcli.tokenizer.load import find_chat_templates

        directory = tokenizer if tokenizer.is_dir() else tokenizer.parent
        try:
            names = sorted(find_chat_templates(directory))
        except PackcliError as exc:  # an unreadable template file: the load reports it in full
            return [exc.message]
        if spec in names:
            return []
    known = f" (the tokenizer's templates: {', '.join(names)})" if names else ""
    return [f"template {spec}: no such file, and not a named template of the tokenizer{known}; use auto, chatml, "
            "trl:NAME, a .jinja file, a tokenizer_config.json, or a template's name"]


def _tokenizer_path(spec: str | Path | None) -> Path | None:
    """Where a ``--tokenizer`` value points (a Hub name: its cached snapshot), or None (not found:
    `tokenizer_problems` reports it)."""
    from packcli.tokenizer.hub import resolve_tokenizer_path

    try:
        return None if spec is None else resolve_tokenizer_path(spec)
    except PackcliError:
        return None


def directory_problems(flag: str, path: str | Path | None) -> list[str]:
    """An existing directory (to read from)."""
    if path is None:
        return []
    if not Path(path).is_dir():
        return [f"{flag} {path}: no such directory"]
    return []


def output_file_problems(flag: str, path: str | Path | None, suffixes: Iterable[str]) -> list[str]:
    """A file packcli may create or replace: a known suffix, not a directory, in a writable directory."""
    if path is None:
        return []
    p = Path(path)
    allowed = tuple(suffixes)
    problems = []
    if not p.name.lower().endswith(allowed):
        problems.append(f"{flag} {p}: the name must end in {' or '.join(allowed)}")
    if p.is_dir():
        problems.append(f"{flag} {p}: is a directory")
    parent = p.parent
    if not parent.is_dir():
        problems.append(f"{flag} {p}: the directory {parent} does not exist")
    elif not os.access(parent, os.W_OK | os.X_OK):
        problems.append(f"{flag} {p}: the directory {parent} is not writable")
    return problems


def output_dir_problems(flag: str, path: str | Path, *, force: bool) -> list[str]:
    """A directory packcli will create (or, with ``force``, replace): its nearest existing ancestor
    must be a writable directory, and an existing non-empty one needs ``force``."""
    p = Path(path)
    if p.exists():
        if not p.is_dir() and not force:
            return [f"{flag} {p}: exists and is a file (pass --force to replace it)"]
        if p.is_dir() and any(p.iterdir()) and not force:
            return [f"{flag} {p}: exists and is not empty (choose another {flag}, or pass --force to replace it)"]
    ancestor = p.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return [f"{flag} {p}: {ancestor} is not a directory"]
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return [f"{flag} {p}: cannot write in {ancestor}"]
    return []


def raise_all(problems: Sequence[str], hint: str | None = None, *,
              error: type[PackcliError] = PackcliError) -> None:
    """Raise one ``error`` (a usage error, exit 2) naming every problem, or return when there are none."""
    if problems:
        raise error("; ".join(problems), hint)
