"""What an example looks like to the trainer: its tokens, which of them carry loss, and its pack's seams.

`show_artifact` picks examples of an artifact (by ID, by source line, or a whole pack), reads the one
shard row they sit in, and returns plain data (`Shown`) that ``packcli show`` draws in the terminal,
writes as one HTML page, or prints as JSON. It is how a user checks a new template or tool-calling
data by eye before a long run: the token boundaries and the supervised tokens are the artifact's own.

Tokens are decoded one after another with the tokenizer's streaming decoder, so a token that ends
inside a UTF-8 character shows nothing and the next one shows the whole character: joined, the
pieces are the example's text, and every piece belongs to exactly one token.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from packcli.artifact import manifest as mf
from packcli.artifact.shards import FlatShard, load_flat, read_parquet, read_shard
from packcli.contract import IGNORE_INDEX
from packcli.errors import InputError, PackcliError


@dataclass(frozen=True)
class Token:
    """One token: its id, its text (possibly empty, see the module docstring), whether it carries loss."""

    id: int
    text: str
    supervised: bool


@dataclass(frozen=True)
class Example:
    """One seam-table row, and the example's tokens when it sits in a pack (else none). ``chunks``: how many
    rows its example has (more than one: it was split, and this row is chunk ``row["chunk"]`` of them)."""

    row: dict
    tokens: tuple[Token, ...]
    chunks: int = 1

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def chunk_label(self) -> str:
        """``chunk 2 of 5 (tokens 8192..12288 of 30000)`` for a chunk of a split example, else ""."""
        row = self.row
        if self.chunks < 2:
            return ""
        end = row["chunk_start"] + (row["length"] or len(self.tokens))
        span = f"tokens {row['chunk_start']}..{end} of {row['original_length']}" if row["length"] else (
            f"from token {row['chunk_start']} of {row['original_length']}")
        return f"chunk {row['chunk']} of {self.chunks} ({span})"


@dataclass(frozen=True)
class Pack:
    """A pack (its number over the whole artifact, its shard and row) and the examples it holds, in order."""

    index: int
    shard: str
    row: int
    num_tokens: int
    seams: tuple[dict, ...]  # per example: example_id, source, line, chunk, offset, length, supervised


@dataclass(frozen=True)
class Shown:
    """Everything ``packcli show`` displays."""

    directory: str
    template: str
    loss_policy: str
    examples: tuple[Example, ...]
    pack: Pack | None
    whole_pack: bool = False  # every example of ``pack`` (--pack), not one example and its pack's seams

    def to_dict(self) -> dict:
        data = asdict(self)
        for example, shown in zip(data["examples"], self.examples):
            example["text"] = shown.text
            example["chunk_label"] = shown.chunk_label
        return data


def show_artifact(directory: str | Path, *, example_id: int | None = None, source: str | None = None,
                  pack: int | None = None, tokenizer: str | None = None,
                  source_root: str | Path | None = None) -> Shown:
    """The examples one selector picks: ``example_id``, ``source`` (``FILE:LINE``), or every example of ``pack``.
    An example split into chunks (``--overlong split``) is shown chunk by chunk, each from its own pack.

    Raises:
        PackcliError: not exactly one selector, nothing matches it, or the tokenizer cannot be found.
    """
    chosen = [name for name, value in (("`example_id`", example_id), ("`source`", source), ("`pack`", pack))
              if value is not None]
    if len(chosen) != 1:
        raise PackcliError("choose exactly one of `example_id=ID`, `source=FILE:LINE`, `pack=N`"
                           + (f" (got {', '.join(chosen)})" if chosen else ""))
    directory = Path(directory)
    manifest = mf.load_manifest(directory)
    rows = read_parquet(directory / manifest.seam_table.name).to_pylist()
    firsts = _pack_numbers(manifest)
    if pack is not None:
        shard, row = _locate_pack(manifest, firsts, pack)
        picked = [r for r in rows if r["shard"] == shard and r["row"] == row]
        picked.sort(key=lambda r: r["offset"])
    else:
        first = _find_row(rows, example_id, source, manifest)
        picked = [r for r in rows if r["example_id"] == first["example_id"]]  # its chunks, when it was split
    decoder = _Decoder(manifest, tokenizer, source_root)
    in_pack = [r for r in picked if r["shard"] is not None]
    flats: dict[str, FlatShard] = {}

    def flat_of(name: str) -> FlatShard:
        if name not in flats:
            flats[name] = load_flat(read_shard(directory / name), name)
        return flats[name]

    shown_pack = None
    if in_pack:
        shard_name, row = in_pack[0]["shard"], in_pack[0]["row"]
        flat = flat_of(shard_name)
        members = sorted((r for r in rows if r["shard"] == shard_name and r["row"] == row), key=lambda m: m["offset"])
        seams = tuple({"example_id": m["example_id"], "source": m["source"], "line": m["line"], "chunk": m["chunk"],
                       "offset": m["offset"], "length": m["length"], "supervised": m["supervised"]} for m in members)
        shown_pack = Pack(firsts[shard_name] + row, shard_name, row,
                          int(flat.row_offsets[row + 1] - flat.row_offsets[row]), seams)
    chunks = Counter(r["example_id"] for r in rows if r["example_id"] in {p["example_id"] for p in picked})
    examples = []
    for r in picked:
        tokens: tuple[Token, ...] = ()
        if r["shard"] is not None:
            flat = flat_of(r["shard"])
            a = int(flat.row_offsets[r["row"]]) + r["offset"]
            ids, labels = flat.ids[a:a + r["length"]].tolist(), flat.labels[a:a + r["length"]].tolist()
            tokens = tuple(Token(i, piece, label != IGNORE_INDEX) for i, piece, label in zip(ids, decoder(ids), labels))
        examples.append(Example(r, tokens, chunks[r["example_id"]]))
    note = manifest.unhashed.get("template_note")
    described = manifest.template.origin + (f": {note}" if note else "")
    return Shown(str(directory), described, manifest.loss_policy, tuple(examples), shown_pack,
                 whole_pack=pack is not None)


def _pack_numbers(manifest: mf.Manifest) -> dict[str, int]:
    """Each shard's first pack number: packs are numbered over the whole artifact, in shard order."""
    firsts, total = {}, 0
    for shard in manifest.shards:
        firsts[shard.name] = total
        total += shard.rows
    return firsts


def _locate_pack(manifest: mf.Manifest, firsts: dict[str, int], number: int) -> tuple[str, int]:
    for shard in manifest.shards:
        if firsts[shard.name] <= number < firsts[shard.name] + shard.rows:
            return shard.name, number - firsts[shard.name]
    packs = sum(s.rows for s in manifest.shards)
    raise InputError(f"`pack` {number}: the artifact has packs 0 to {packs - 1}")


def _find_row(rows: list[dict], example_id: int | None, source: str | None, manifest: mf.Manifest) -> dict:
    if example_id is not None:
        found = [r for r in rows if r["example_id"] == example_id]
        if not found:
            raise InputError(f"`example_id` {example_id}: no such example in the seam table",
                             "example IDs are in examples.parquet, or pick one with `source=FILE:LINE`")
        return found[0]
    path, sep, line = (source or "").rpartition(":")
    if not sep or not line.isdigit() or not path:
        raise InputError(f"`source` {source!r}: expected FILE:LINE, e.g. data/chat.jsonl:42")
    wanted = Path(path).parts
    given = manifest.provenance.get("inputs") or []

    def names(k: int) -> list[tuple[str, ...]]:
        """How input ``k`` may be named: the path pack was given, and its file name."""
        known = [Path(manifest.inputs[k].name).parts]
        if k < len(given) and given[k]:
            known.append(Path(given[k]).parts)
        return known

    found = [r for r in rows if r["line"] == int(line)
             and any(parts[-len(wanted):] == wanted for parts in names(r["input"]))]
    inputs = sorted({r["input"] for r in found})
    if len(inputs) > 1:
        raise InputError(f"`source` {source}: matches {len(inputs)} inputs "
                         f"({', '.join(manifest.inputs[k].name for k in inputs)})", "give more of the path")
    if not found:
        raise InputError(f"`source` {source}: no record at that line of that input",
                         "inputs: " + ", ".join(sorted({i.name for i in manifest.inputs})[:5]))
    return found[0]


class _Decoder:
    """Each token's text, decoded in order with the pinned tokenizer's streaming decoder."""

    def __init__(self, manifest: mf.Manifest, override: str | None, source_root: str | Path | None) -> None:
        from packcli.tokenizer.load import cached_tokenizer
        from packcli.verify.locate import find_tokenizer

        pinned = manifest.tokenizer
        path = find_tokenizer(manifest, Path(source_root) if source_root else None, override)
        if path is None or not path.exists():
            raise InputError(f"tokenizer {path}: not found (show decodes the tokens with it)",
                             "pass `tokenizer`, or run from the directory pack ran in")
        loaded = cached_tokenizer(path)
        if loaded.sha256 != pinned.sha256:
            raise InputError(f"tokenizer {path}: sha256 {loaded.sha256[:16]}, but the artifact was packed with "
                             f"{pinned.sha256[:16]}", "pass the tokenizer the artifact was packed with")
        self.tokenizer = loaded.tokenizer

    def __call__(self, ids: list[int]) -> list[str]:
        from tokenizers.decoders import DecodeStream

        stream = DecodeStream(skip_special_tokens=False)
        return [stream.step(self.tokenizer, i) or "" for i in ids]
