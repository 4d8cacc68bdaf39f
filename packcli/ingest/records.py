"""Records: detect the format, validate and normalise one record, whatever source kind it came from.

A record arrives as a JSONL line's bytes or as a row of a Parquet or Arrow table (a dict), and ends
up as exactly one of: a `Record` (normalised, ready to render) or a `Rejection` (file, line or row,
reason). Nothing is dropped silently, so counts always add up.
Validation is strict and names the field ("messages[2].content: expected a string ...") because a
vague rejection is a rejection nobody fixes; a chat record's messages are checked and shaped in
`packcli.ingest.messages`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import Enum

from packcli.choices import Format
from packcli.ingest.fields import DEFAULT_FIELDS, FieldMap
from packcli.ingest.messages import Invalid, chat_messages, sharegpt_messages, template_kwargs, type_name, walk_strings


class Kind(str, Enum):
    """What a record is once normalised: it decides rendering and the default loss policy."""

    chat = "chat"
    prompt_completion = "prompt-completion"
    text = "text"


@dataclass(frozen=True)
class Record:
    """One valid input record, normalised. ``file_index`` indexes the run's sorted input list.

    A chat record's ``messages`` are dicts in the shape a chat template reads them (`packcli.ingest.messages`),
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


def content_key(record: Record) -> bytes:
    """16 bytes that are equal for two records exactly when they say the same thing once read (every
    field of the normalised record but where it is and how it was read), whatever their files'
    formats or JSON spelling: what ``--dedupe exact`` compares. 128 bits, so a collision in any real
    corpus is out of reach."""
    data = asdict(record)
    for where in ("file_index", "line", "format", "ambiguous"):
        del data[where]
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_plain)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _plain(value: object) -> object:
    """JSON for what a record may hold beyond JSON's types: sets (``untrained``) sorted, anything a
    table row carries (bytes, dates) as its repr, so different values never hash alike."""
    return sorted(value) if isinstance(value, (set, frozenset)) else repr(value)


@dataclass(frozen=True)
class Rejection:
    """One input record that could not be used, and why (and its format, when it was recognised)."""

    file_index: int
    line: int
    reason: str
    format: Format | None = None


def parse_record(raw: bytes | dict, *, file_index: int, line: int, fmt: Format = Format.auto,
                 fields: FieldMap = DEFAULT_FIELDS) -> Record | Rejection:
    """Decode, parse and normalise one record, or say exactly why it cannot be used.

    Args:
        raw: a JSONL line's bytes, or a Parquet/Arrow row as a dict (already decoded; a null there
            arrives as an absent field, see `packcli.ingest.columnar`).
        fields: where each part of the record is read from (`FieldMap`), applied before detection.
    """
    if isinstance(raw, dict):
        obj: object = raw
    else:
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
        obj = fields.apply(obj)
        chosen, ambiguous = _detect(obj) if fmt is Format.auto else (fmt, ())
        record = _normalise(obj, file_index, line, chosen, ambiguous)
        # A surrogate can only come from a \uD800-\uDFFF escape in JSON text (Arrow strings are valid UTF-8).
        if isinstance(raw, bytes) and (b"\\ud" in raw or b"\\uD" in raw):
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
