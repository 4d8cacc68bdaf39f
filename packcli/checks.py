"""Checks of what a user passes (numbers, input paths, output paths), made before any work starts.

Each function returns the problems it finds as one-line strings that name the option (``flag``: the
CLI's ``--plot``, or a library parameter in backticks, ```out```, which the CLI prints as its flag), the
value and what is allowed, so a command can collect every problem and report them all at once (`raise_all`).
They read the filesystem (does it exist, can it be written); where only trying tells (root, a
read-only mount, /proc), an output check makes a probe file of its own and removes it at once. A
failed check leaves nothing behind.
"""

from __future__ import annotations

import functools
import glob
import math
import numbers
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from packcli.contract import MAX_INT32
from packcli.errors import PackcliError

INPUT_SUFFIXES = (".jsonl", ".json", ".ndjson")
TABLE_SUFFIXES = (".parquet", ".arrow")
COMPRESSED_SUFFIXES = ("", ".gz", ".zst")
CSV_NAMES = (".csv", ".tsv", ".csv.gz", ".tsv.gz")
CSV_FIX = ("packcli reads JSON Lines, JSON arrays, Parquet and datasets tables: convert it first, e.g. "
           "datasets.load_dataset('csv', data_files='{path}')['train'].save_to_disk(DIR), then pass DIR")
# Files a Hugging Face model folder holds beside tokenizer.json, which a user may pass by mistake.
NEIGHBOURS = ("tokenizer_config.json", "config.json", "special_tokens_map.json", "generation_config.json",
              "vocab.json", "chat_template.jinja", "chat_template.json")


def _path_errors_are_problems(check: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """A path the system cannot even look at (a name too long for it, say) is a problem with that
    path, reported like the others, not a crash."""

    @functools.wraps(check)
    def checked(*args: Any, **kwargs: Any) -> list[str]:
        try:
            return check(*args, **kwargs)
        except OSError as exc:
            flag = args[0] if args and isinstance(args[0], str) and args[0].startswith(("-", "`")) else None
            where = " ".join(str(x) for x in (flag, exc.filename) if x)
            return [f"{where}: {(exc.strerror or str(exc)).lower()}"]

    return checked


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


@_path_errors_are_problems
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


@_path_errors_are_problems
def tokenizer_problems(flag: str, path: str | Path | None) -> list[str]:
    """A tokenizer.json(.gz) file, a directory holding one, or a Hub name in the local cache
    (`packcli.tokenizer.hub`; a miss carries the command that fetches it); not one of the files that
    sit beside tokenizer.json."""
    if path is None:
        return []
    from packcli.tokenizer.hub import TOKENIZER_FILES, resolve_tokenizer_path

    try:
        p = resolve_tokenizer_path(path)
    except PackcliError as exc:
        return [f"{flag} {exc.message.removeprefix('tokenizer ')}" + (f"; {exc.hint}" if exc.hint else "")]
    if p.is_dir():
        if not any((p / name).is_file() for name in TOKENIZER_FILES):
            return [f"{flag} {p}: no tokenizer.json in this directory"]
        return []
    if not p.is_file():
        return [f"{flag} {p}: no such file or directory"]
    if p.name in NEIGHBOURS:
        beside = any((p.parent / name).is_file() for name in TOKENIZER_FILES)
        where = (f"its folder {p.parent}, which holds tokenizer.json and this file" if beside
                 else "the tokenizer.json it belongs with, or the folder holding both")
        return [f"{flag} {p}: is the model's {p.name}, not its tokenizer.json; pass {where}"]
    return []


@_path_errors_are_problems
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


@_path_errors_are_problems
def directory_problems(flag: str, path: str | Path | None) -> list[str]:
    """An existing directory (to read from)."""
    if path is None:
        return []
    if not Path(path).is_dir():
        return [f"{flag} {path}: no such directory"]
    return []


@_path_errors_are_problems
def scratch_dir_problems(flag: str, path: str | Path | None, artifact: str | Path) -> list[str]:
    """Where ``verify`` may make its scratch folder (None: the system's temporary folder, ``$TMPDIR``): an existing
    folder it can write in, outside ``artifact`` (a closed set of files: verify would find its own folder there
    and report it as a stranger)."""
    named = flag if path is not None else "the temporary folder ($TMPDIR)"
    where = Path(tempfile.gettempdir()) if path is None else Path(path)
    if not where.is_dir():
        return [f"{named} {where}: no such directory"]
    inside = Path(artifact).resolve()
    if where.resolve() == inside or inside in where.resolve().parents:
        return [f"{named} {where} is inside the artifact {artifact}: verify would find its own scratch folder there; "
                "choose a folder outside it"]
    return _unwritable(named, where, where.absolute())


@_path_errors_are_problems
def output_file_problems(flag: str, path: str | Path | None, suffixes: Iterable[str] | None = None) -> list[str]:
    """A file packcli may create or replace: a known suffix, not a directory, no file of the user's
    there (`packcli.owned.replace_problems`), in a directory it can write in."""
    from packcli.owned import replace_problems

    if path is None:
        return []
    p = Path(path)
    problems = []
    allowed = tuple(suffixes or ())
    if allowed and not p.name.lower().endswith(allowed):
        problems.append(f"{flag} {p}: the name must end in {' or '.join(allowed)}")
    if p.is_dir() and not p.is_symlink():
        problems.append(f"{flag} {p}: is a directory")
    else:
        problems += replace_problems(flag, p)
    parent = p.absolute().parent
    if not parent.is_dir():
        problems.append(f"{flag} {p}: the directory {p.parent} does not exist")
    elif not os.access(parent, os.W_OK | os.X_OK):
        problems.append(f"{flag} {p}: the directory {p.parent} is not writable")
    else:
        problems += _unwritable(flag, p, parent)
    return problems


@_path_errors_are_problems
def output_dir_problems(flag: str, path: str | Path, *, force: bool, inputs: Sequence[str | Path] = ()) -> list[str]:
    """A directory packcli will create, or replace: an empty folder, or with ``force`` a packcli artifact
    (`packcli.artifact.listing.not_an_artifact`). Never a link, a file, a folder that holds any of
    ``inputs``, the current directory or one above it, the home directory or ``/``. The nearest
    existing ancestor must be a folder packcli can write in."""
    from packcli.artifact.listing import not_an_artifact

    p = Path(path)
    if p.is_symlink():
        return [f"{flag} {p}: is a symbolic link (to {os.readlink(p)}); packcli replaces only a folder it wrote: "
                f"choose another {flag}"]
    real = os.path.realpath(p)
    special = _special_folder(real)
    if special:
        return [f"{flag} {p}: is {special}; packcli replaces only a folder it wrote: choose a new folder, "
                f"e.g. {flag} packed"]
    if p.exists():
        if not p.is_dir():
            return [f"{flag} {p}: exists and is a file; packcli replaces only a folder it wrote: choose another {flag}"]
        held = _held_input(real, inputs)
        if held:
            return [f"{flag} {p}: holds the input {held}; choose an {flag} outside the inputs"]
        reason = not_an_artifact(p)
        if reason is None and not force:
            return [f"{flag} {p}: exists (a packcli artifact); pass `force` to replace it, or choose another {flag}"]
        if reason not in (None, "is empty"):
            return [f"{flag} {p}: {reason}, so packcli did not write it; `force` replaces only a packcli artifact "
                    f"or an empty folder: choose another {flag}"]
        if not os.access(p, os.W_OK | os.X_OK):
            return [f"{flag} {p}: is not writable (packcli moves it aside to replace it)"]
    ancestor = p.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return [f"{flag} {p}: {ancestor} is not a directory"]
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return [f"{flag} {p}: cannot write in {ancestor}"]
    return _unwritable(flag, p, ancestor)


def _unwritable(flag: str, path: Path, folder: Path) -> list[str]:
    """What ``os.access`` cannot tell (root, a read-only mount, /proc), learned by making a probe file in
    ``folder`` and removing it at once; and names on the way to ``path`` too long for its filesystem."""
    limit = name_max(folder)
    long = [part for part in path.absolute().relative_to(folder).parts if len(part.encode()) > limit]
    if long:
        return [f"{flag} {path}: the name {long[0][:40]}... is too long ({len(long[0].encode())} bytes; this "
                f"filesystem allows {limit}); choose a shorter one"]
    try:
        fd, probe = tempfile.mkstemp(prefix=".packcli-probe-", dir=folder)
    except OSError as exc:
        return [f"{flag} {path}: cannot write in {folder} ({(exc.strerror or str(exc)).lower()})"]
    os.close(fd)
    os.unlink(probe)
    return []


def name_max(path: str | Path) -> int:
    """The longest file name allowed in ``path``'s nearest existing folder (255 where it cannot tell)."""
    folder = Path(os.path.abspath(path))
    while not folder.exists():
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _special_folder(real: str) -> str | None:
    """What ``real`` (a resolved path) is, when it is a folder no command may replace."""
    cwd = os.path.realpath(os.getcwd())
    try:
        home = os.path.realpath(Path.home())
    except (KeyError, RuntimeError):  # no home directory known
        home = None
    if real == os.sep:
        return "the root directory"
    if real == home:
        return "the home directory"
    if real == cwd:
        return "the current directory"
    if cwd.startswith(real.rstrip(os.sep) + os.sep):
        return "a folder above the current directory"
    return None


def _held_input(real: str, inputs: Sequence[str | Path]) -> str | None:
    """The first of ``inputs`` (files, globs, folders) that is ``real`` or inside it, as the user wrote it."""
    from packcli.ingest.sources import HUB_PREFIX

    inside = real.rstrip(os.sep) + os.sep
    for pattern in inputs:
        text = str(pattern)
        if text.startswith(HUB_PREFIX):
            continue
        for match in sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]:
            where = os.path.realpath(match)
            if where == real or where.startswith(inside):
                return match
    return None


def raise_all(problems: Sequence[str], hint: str | None = None, *,
              error: type[PackcliError] = PackcliError) -> None:
    """Raise one ``error`` (a usage error, exit 2) naming every problem, or return when there are none."""
    if problems:
        raise error("; ".join(problems), hint)
