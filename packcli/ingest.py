"""Read JSONL chat data: expand inputs, open plain/gz/zst files, detect formats, validate records.

Every non-blank line is one record and ends up as exactly one of: a `Record` (normalised, ready to
render) or a `Rejection` (file, line, reason). Nothing is dropped silently, so counts always add up.
Validation is strict and names the field ("messages[2].content: expected a string ...") because a
vague rejection is a rejection nobody fixes.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO

from packcli.choices import Format
from packcli.contract import file_sha256
from packcli.errors import InputError


class Kind(str, Enum):
    """What a record is once normalised: it decides rendering and the default loss policy."""

    chat = "chat"
    prompt_completion = "prompt-completion"
    text = "text"


ROLES = frozenset({"system", "user", "assistant", "tool"})
SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "chatgpt": "assistant", "assistant": "assistant", "bing": "assistant", "bard": "assistant",
    "system": "system", "tool": "tool", "function": "tool", "observation": "tool",
}


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Record:
    """One valid input record, normalised. ``file_index`` indexes the run's sorted input list."""

    file_index: int
    line: int
    kind: Kind
    messages: tuple[Message, ...] = ()
    prompt: str = ""
    completion: str = ""
    text: str = ""


@dataclass(frozen=True)
class Rejection:
    """One input record that could not be used, and why."""

    file_index: int
    line: int
    reason: str


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


class _Invalid(Exception):
    """Internal: a record failed validation; its message is the rejection reason."""


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
    try:
        if not isinstance(obj, dict):
            raise _Invalid(f"expected a JSON object, got {_type_name(obj)}")
        record = _normalise(obj, file_index, line, _detect(obj) if fmt is Format.auto else fmt)
        if b"\\ud" in raw or b"\\uD" in raw:  # a surrogate can only come from a \uD800-\uDFFF escape
            _check_encodable(record)
    except _Invalid as exc:
        return Rejection(file_index, line, str(exc))
    return record


def _detect(obj: dict) -> Format:
    if "messages" in obj:
        return Format.messages
    if "conversations" in obj:
        return Format.sharegpt
    if "prompt" in obj or "completion" in obj:
        return Format.prompt_completion
    if "text" in obj:
        return Format.text
    keys = ", ".join(sorted(obj)[:5]) or "none"
    raise _Invalid(f"no known field (messages, conversations, prompt/completion, text); keys: {keys}")


def _normalise(obj: dict, file_index: int, line: int, fmt: Format) -> Record:
    if fmt is Format.messages:
        turns = _turns(obj, "messages", "role", "content", lambda role: role if role in ROLES else None)
        return Record(file_index, line, Kind.chat, messages=turns)
    if fmt is Format.sharegpt:
        turns = _turns(obj, "conversations", "from", "value", lambda role: SHAREGPT_ROLES.get(role.lower()))
        return Record(file_index, line, Kind.chat, messages=turns)
    if fmt is Format.prompt_completion:
        prompt, completion = _string(obj, "prompt"), _string(obj, "completion")
        if not completion:
            raise _Invalid("completion: empty")
        return Record(file_index, line, Kind.prompt_completion, prompt=prompt, completion=completion)
    text = _string(obj, "text")
    if not text:
        raise _Invalid("text: empty")
    return Record(file_index, line, Kind.text, text=text)


def _turns(obj: dict, key: str, role_key: str, content_key: str, map_role) -> tuple[Message, ...]:
    turns = obj.get(key)
    if not isinstance(turns, list):
        raise _Invalid(f"{key}: expected a list of turns, got {_type_name(turns)}")
    if not turns:
        raise _Invalid(f"{key}: empty conversation")
    out = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise _Invalid(f"{key}[{i}]: expected an object, got {_type_name(turn)}")
        raw_role = turn.get(role_key)
        if not isinstance(raw_role, str):
            raise _Invalid(f"{key}[{i}].{role_key}: expected a string, got {_type_name(raw_role)}")
        role = map_role(raw_role)
        if role is None:
            raise _Invalid(f"{key}[{i}].{role_key}: unknown role {raw_role!r}")
        content = turn.get(content_key)
        out.append(Message(role, content if type(content) is str else _content(content, f"{key}[{i}].{content_key}")))
    return tuple(out)


def _content(value: object, where: str) -> str:
    """A message's content: a string, or OpenAI's list of text parts joined in order."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for j, part in enumerate(value):
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise _Invalid(f"{where}[{j}]: expected a text part {{'type': 'text', 'text': ...}}")
        return "".join(parts)
    raise _Invalid(f"{where}: expected a string or a list of text parts, got {_type_name(value)}")


def _string(obj: dict, key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _Invalid(f"{key}: expected a string, got {_type_name(value)}")
    return value


def _check_encodable(record: Record) -> None:
    """Reject lone surrogates (JSON escapes like \\ud800): they cannot be encoded to UTF-8 or tokenized."""
    pieces = [m.content for m in record.messages] + [record.prompt, record.completion, record.text]
    for piece in pieces:
        try:
            piece.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _Invalid(f"lone surrogate {piece[exc.start]!r} in text; fix the escape in the source") from exc


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__
    )
