"""Read JSONL chat data: expand inputs, open plain/gz/zst files, detect formats, validate records.

Every non-blank line is one record and ends up as exactly one of: a `Record` (normalised, ready to
render) or a `Rejection` (file, line, reason). Nothing is dropped silently, so counts always add up.
Validation is strict and names the field ("messages[2].content: expected a string ...") because a
vague rejection is a rejection nobody fixes; a chat record's messages are checked and shaped in
`packcli.messages`.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO

from packcli.choices import Format
from packcli.contract import file_sha256
from packcli.errors import InputError
from packcli.messages import (
    Invalid,
    chat_messages,
    sharegpt_messages,
    template_kwargs,
    type_name,
    walk_strings,
)


class Kind(str, Enum):
    """What a record is once normalised: it decides rendering and the default loss policy."""

    chat = "chat"
    prompt_completion = "prompt-completion"
    text = "text"


@dataclass(frozen=True)
class Record:
    """One valid input record, normalised. ``file_index`` indexes the run's sorted input list.

    A chat record's ``messages`` are dicts in the shape a chat template reads them (`packcli.messages`),
    ``template_kwargs`` its ``tools``, ``documents`` and ``chat_template_kwargs``, and ``untrained`` the
    indices of turns marked ``weight: 0``. ``format`` is the format it was read as; ``ambiguous`` names
    the other known fields it also has (under ``--format auto`` the first in `_PRECEDENCE` wins).
    """

    file_index: int
    line: int
    kind: Kind
    messages: tuple[dict, ...] = ()
    prompt: str = ""
    completion: str = ""
    text: str = ""
    format: Format = Format.auto
    ambiguous: tuple[str, ...] = ()
    template_kwargs: dict = field(default_factory=dict)
    untrained: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Rejection:
    """One input record that could not be used, and why (and its format, when it was recognised)."""

    file_index: int
    line: int
    reason: str
    format: Format | None = None


@dataclass(frozen=True)
class InputFile:
    """An input file as pinned in the manifest."""

    path: Path
    size: int
    sha256: str


def expand_inputs(patterns: Sequence[str | Path]) -> list[Path]:
    """Expand paths and globs into a sorted list of existing files, each file once (however it is named).

    Raises:
        InputError: a pattern matches nothing, or a path is a directory.
    """
    found: dict[str, Path] = {}
    for pattern in patterns:
        text = str(pattern)
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        if not matches or not all(Path(m).exists() for m in matches):
            raise InputError(f"{text}: no such file", "check the path; globs are expanded by packcli when quoted")
        for match in matches:
            path = Path(match)
            if path.is_dir():
                raise InputError(f"{path}: is a directory", "pass the JSONL files inside it, e.g. 'DIR/*.jsonl'")
            found.setdefault(os.path.realpath(path), path)
    return sorted(found.values(), key=lambda p: str(p))


def describe_input(path: Path) -> InputFile:
    """Size and sha256 of the file as stored (compressed bytes for .gz/.zst)."""
    return InputFile(path=path, size=path.stat().st_size, sha256=file_sha256(path))


def describe_inputs(patterns: Sequence[str | Path]) -> list[InputFile]:
    """The input files in the order ``pack`` reads them: by base name, then content (sha256).

    Never by directory, so the same files give the same example order, seam table and manifest
    wherever they sit; the paths stay in the manifest's provenance only.
    """
    files = [describe_input(p) for p in expand_inputs(patterns)]
    return sorted(files, key=lambda f: (f.path.name, f.sha256, str(f.path)))


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a JSONL file for reading raw lines, decompressing .gz and .zst transparently."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


@contextmanager
def read_errors(path: str | Path) -> Iterator[None]:
    """Turn a failure to read or decompress ``path`` into an `InputError` that names it."""
    try:
        yield
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot read: {exc}", "is the file complete and its extension right?") from exc
    except Exception as exc:  # zstandard raises its own ZstdError for corrupt frames
        if type(exc).__name__ == "ZstdError":
            raise InputError(f"{path}: cannot decompress: {exc}") from exc
        raise


def read_lines(path: str | Path, file_index: int) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, raw bytes) for every non-blank line.

    Raises:
        InputError: the file cannot be read or decompressed.
    """
    with read_errors(path), open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                yield number, raw



def parse_record(raw: bytes, *, file_index: int, line: int, fmt: Format = Format.auto) -> Record | Rejection:
    """Decode, parse and normalise one JSONL line, or say exactly why it cannot be used."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejection(file_index, line, f"invalid UTF-8 at byte {exc.start}; re-encode the file as UTF-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return Rejection(file_index, line, f"malformed JSON: {exc.msg} (column {exc.colno})")
    chosen = None
    try:
        if not isinstance(obj, dict):
            raise Invalid(f"expected a JSON object, got {type_name(obj)}")
        chosen, ambiguous = _detect(obj) if fmt is Format.auto else (fmt, ())
        record = _normalise(obj, file_index, line, chosen, ambiguous)
        if b"\\ud" in raw or b"\\uD" in raw:  # a surrogate can only come from a \uD800-\uDFFF escape
            _check_encodable(record)
    except Invalid as exc:
        return Rejection(file_index, line, str(exc), chosen)
    return record


# Under --format auto the first of these a record has decides its format; the others it has make it ambiguous.
_PRECEDENCE = ((Format.messages, ("messages",)), (Format.sharegpt, ("conversations",)),
               (Format.prompt_completion, ("prompt", "completion")), (Format.text, ("text",)))


def _detect(obj: dict) -> tuple[Format, tuple[str, ...]]:
    present = [(fmt, [k for k in keys if k in obj]) for fmt, keys in _PRECEDENCE]
    present = [(fmt, keys) for fmt, keys in present if keys]
    if not present:
        keys = ", ".join(sorted(obj)[:5]) or "none"
        raise Invalid(f"no known field (messages, conversations, prompt/completion, text); keys: {keys}")
    return present[0][0], tuple(k for _, keys in present[1:] for k in keys)


def _normalise(obj: dict, file_index: int, line: int, fmt: Format, ambiguous: tuple[str, ...]) -> Record:
    base = dict(file_index=file_index, line=line, format=fmt, ambiguous=ambiguous)
    if fmt in (Format.messages, Format.sharegpt):
        read = chat_messages if fmt is Format.messages else sharegpt_messages
        messages, untrained = read(obj, "messages" if fmt is Format.messages else "conversations")
        return Record(kind=Kind.chat, messages=messages, template_kwargs=template_kwargs(obj), untrained=untrained,
                      **base)
    if fmt is Format.prompt_completion:
        prompt, completion = _string(obj, "prompt"), _string(obj, "completion")
        if not completion:
            raise Invalid("completion: empty")
        return Record(kind=Kind.prompt_completion, prompt=prompt, completion=completion, **base)
    text = _string(obj, "text")
    if not text:
        raise Invalid("text: empty")
    return Record(kind=Kind.text, text=text, **base)


def _string(obj: dict, key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise Invalid(f"{key}: expected a string, got {type_name(value)}")
    return value


def _check_encodable(record: Record) -> None:
    """Reject lone surrogates (JSON escapes like \\ud800): they cannot be encoded to UTF-8 or tokenized."""
    def visit(piece: str) -> None:
        try:
            piece.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise Invalid(f"lone surrogate {piece[exc.start]!r} in text; fix the escape in the source") from exc

    walk_strings([record.messages, record.template_kwargs, record.prompt, record.completion, record.text], visit)
