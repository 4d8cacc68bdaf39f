"""Column mapping: read records whose fields have other names than packcli's.

A `FieldMap` says which field of the user's records plays each canonical part: ``messages`` and, in
each of its turns, ``role`` and ``content``; ``prompt`` and ``completion``; ``text``. It is applied
to every record of every source kind the same way (a JSONL object, a Parquet row, a ``datasets`` row),
before the format is detected, so ``--messages-field conversation`` makes a record with a
``conversation`` list of turns an OpenAI ``messages`` record.

A mapped field replaces the canonical one: with ``--text-field body`` a record's ``body`` is its text
and a field that happens to be called ``text`` is not read, so a record never has two candidates for
one part. ShareGPT's ``conversations``/``from``/``value`` are that format's own names and are not
mapped; map ``--messages-field conversations --role-field from --content-field value`` to read
such turns as OpenAI messages instead (the ShareGPT role aliases then do not apply).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

TOP_LEVEL = ("messages", "prompt", "completion", "text")  # parts that are fields of the record
IN_TURNS = ("role", "content")  # parts that are keys of each turn of ``messages``
OPTIONS = {part: f"`fields.{part}`" for part in TOP_LEVEL + IN_TURNS}  # how a message names each part


@dataclass(frozen=True)
class FieldMap:
    """The field name that plays each canonical part (the default: the part's own name)."""

    messages: str = "messages"
    role: str = "role"
    content: str = "content"
    prompt: str = "prompt"
    completion: str = "completion"
    text: str = "text"

    @classmethod
    def of(cls, renames: dict[str, str] | None) -> FieldMap:
        """From ``{part: field}`` as the manifest pins it (only the parts that differ)."""
        return cls(**(renames or {}))

    def problems(self) -> list[str]:
        """What is wrong with the mapping, one line per problem (empty: nothing)."""
        out = []
        for part, name in asdict(self).items():
            if not isinstance(name, str) or not name.strip():
                out.append(f"{OPTIONS[part]} must name a field, got {name!r}")
        for group in (TOP_LEVEL, IN_TURNS):
            seen: dict[str, str] = {}
            for part in group:
                name = getattr(self, part)
                if name in seen:
                    out.append(f"{OPTIONS[seen[name]]} and {OPTIONS[part]} both read the field {name!r}; "
                               f"map the other part to its own field")
                seen.setdefault(name, part)
        return out

    def renames(self) -> dict[str, str]:
        """``{part: field}`` for every part read from a field of another name (the manifest pins this)."""
        return {part: name for part, name in asdict(self).items() if name != part}

    def option(self, part: str) -> str:
        """How a message names where ``part`` is read from: ``'conversation' (`fields.messages`)``."""
        name = getattr(self, part)
        return f"{name!r} ({OPTIONS[part]})" if name != part else repr(name)

    def apply(self, obj: dict) -> dict:
        """The record with every mapped field under its canonical name (the input is not changed)."""
        top = [(part, getattr(self, part)) for part in TOP_LEVEL if getattr(self, part) != part]
        turn = [(part, getattr(self, part)) for part in IN_TURNS if getattr(self, part) != part]
        if not top and not turn:
            return obj
        out = _renamed(obj, top) if top else dict(obj)
        turns = out.get("messages")
        if turn and isinstance(turns, list):
            out["messages"] = [_renamed(t, turn) if isinstance(t, dict) else t for t in turns]
        return out


def _renamed(obj: dict, pairs: list[tuple[str, str]]) -> dict:
    """``obj`` with each ``(part, field)``'s value moved from ``field`` to ``part``; a field already
    named ``part`` is dropped (the mapped one replaces it)."""
    moved = {part: obj[name] for part, name in pairs if name in obj}
    hidden = {name for _, name in pairs} | {part for part, _ in pairs}
    out = {k: v for k, v in obj.items() if k not in hidden}
    out.update(moved)
    return out


DEFAULT_FIELDS = FieldMap()
