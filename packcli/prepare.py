"""Records -> encoded examples: the one code path that both ``pack`` and ``verify`` run.

``verify`` reconstructs every example by calling exactly this on the source lines, so a change to
parsing, rendering or masking that would move a seam shows up as a reconstruction mismatch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Protocol

import numpy as np
import numpy.typing as npt

from packcli.chat import ChatTemplate, Renderer, RenderError
from packcli.choices import Format, LossPolicy
from packcli.errors import InputError, PackcliError
from packcli.ingest import DEFAULT_FIELDS, FieldMap, Kind, Record, content_key, parse_record
from packcli.tokenizer import Encoded, EncodedBatch, LoadedTokenizer, TokenizerMismatchError, encode_batch
from packcli.tokenizer.ends import text_ends
from packcli.tokenizer.load import cached_tokenizer

NO_SUPERVISED = "no supervised tokens after tokenization (the template's generation blocks map to no tokens)"


@dataclass
class InputWarnings:
    """What a user should hear about records that were used anyway (summed over a run).

    ``ambiguous``: records read by precedence although they hold more than one known field (the
    first as ``(file_index, line)``); ``ignored``: per field, records carrying it where the template
    never reads it (`packcli.chat.Renderer.ignored_fields`); ``dropped``: per field, records made into an
    example although the template dropped that field, as ``--allow-dropped-fields`` lets it
    (`packcli.chat.guards`; the manifest counts them).
    """

    ambiguous: int = 0
    first_ambiguous: tuple[int, int] | None = None
    ignored: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def note(self, record: Record, ignored: set[str]) -> None:
        if record.ambiguous:
            self.ambiguous += 1
            where = (record.file_index, record.line)
            self.first_ambiguous = min(self.first_ambiguous or where, where)
        for name in ignored:
            self.ignored[name] = self.ignored.get(name, 0) + 1

    def add(self, other: InputWarnings) -> None:
        self.ambiguous += other.ambiguous
        if other.first_ambiguous is not None:
            self.first_ambiguous = min(self.first_ambiguous or other.first_ambiguous, other.first_ambiguous)
        for counts, more in ((self.ignored, other.ignored), (self.dropped, other.dropped)):
            for name, count in more.items():
                counts[name] = counts.get(name, 0) + count

    def to_dict(self) -> dict:
        return {"ambiguous": self.ambiguous, "first_ambiguous": self.first_ambiguous,
                "ignored": dict(sorted(self.ignored.items())), "dropped": dict(sorted(self.dropped.items()))}

    @classmethod
    def from_dict(cls, data: dict) -> InputWarnings:
        first = data.get("first_ambiguous")
        return cls(data["ambiguous"], tuple(first) if first else None, dict(data["ignored"]), dict(data["dropped"]))


@dataclass(eq=False)
class Prepared(Sequence["Encoded | str"]):
    """A batch's outcomes in record order: each record's example, or the reason it was rejected.

    ``encoded`` holds the accepted examples end to end, in record order (what ``pack`` writes at once),
    with their ``supervised`` token counts; ``rows[i]`` is record ``i``'s row in it, or its reason.
    ``formats[i]`` is the format record ``i`` was read as ("" when it was not recognised).
    ``keys[i]``: record ``i``'s `packcli.ingest.content_key` (None where it did not parse), when the
    preparer was asked for keys (``--dedupe exact``); else None. ``dropped[i]``: the fields the template
    dropped from record ``i`` that ``--allow-dropped-fields`` allows (empty for a rejected record).
    """

    encoded: EncodedBatch
    supervised: npt.NDArray[np.int64]
    rows: list[int | str]
    formats: list[str] = field(default_factory=list)
    warnings: InputWarnings = field(default_factory=InputWarnings)
    keys: list[bytes | None] | None = None
    dropped: list[frozenset[str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - int -> Encoded | str
        row = self.rows[i]
        return row if isinstance(row, str) else self.encoded[row]

    def __iter__(self) -> Iterator[Encoded | str]:
        examples = iter(self.encoded)
        return (row if isinstance(row, str) else next(examples) for row in self.rows)


@dataclass
class Preparer:
    """Parses, renders and tokenizes batches of records; accumulates stage timings.

    ``fields``: the column mapping applied to every record; ``keys``: also return each record's
    content key (what ``--dedupe exact`` compares).
    """

    renderer: Renderer
    tokenizer: LoadedTokenizer
    input_format: Format = Format.auto
    fields: FieldMap = DEFAULT_FIELDS
    keys: bool = False
    seconds: dict[str, float] = field(default_factory=lambda: {"read_render_s": 0.0, "tokenize_s": 0.0})

    def prepare(self, batch: Sequence[tuple[int, int, bytes | dict]], *, source: str = "input") -> Prepared:
        """For each (file_index, record number, payload): the encoded example, or the reason it is rejected.

        A payload is a JSONL line's bytes or a Parquet/Arrow row as a dict (`packcli.ingest.Reader`).

        Raises:
            TokenizerMismatchError: the accelerated tokenizer disagreed with the reference on a
                record, named as ``source:line``. That is a bug, not bad data, so the run stops.
        """
        t0 = time.perf_counter()
        outcomes: list[object] = []
        formats: list[str] = []
        warnings = InputWarnings()
        keys: list[bytes | None] | None = [] if self.keys else None
        for fi, line, raw in batch:
            parsed = parse_record(raw, file_index=fi, line=line, fmt=self.input_format, fields=self.fields)
            formats.append(parsed.format.value if parsed.format is not None else "")
            if keys is not None:
                keys.append(content_key(parsed) if isinstance(parsed, Record) else None)
            if isinstance(parsed, Record):
                try:
                    outcomes.append(self.renderer.render(parsed))
                except RenderError as exc:
                    outcomes.append(str(exc))
                    continue
                warnings.note(parsed, self.renderer.ignored_fields(parsed) if parsed.kind is Kind.chat else set())
            else:
                outcomes.append(parsed.reason)
        t1 = time.perf_counter()
        good = [i for i, o in enumerate(outcomes) if not isinstance(o, str)]
        rendered = [outcomes[i] for i in good]
        try:
            encoded = encode_batch(self.tokenizer, [r.text for r in rendered], [r.spans for r in rendered],
                                   [r.add_special_tokens for r in rendered])
        except TokenizerMismatchError as exc:
            raise exc.located(f"{source}:{batch[good[exc.batch_index]][1]}") from None
        supervised = encoded.supervised
        keep = supervised > 0
        if not keep.all():
            encoded, supervised = EncodedBatch.of([e for e, k in zip(encoded, keep) if k]), supervised[keep]
        rows = iter(range(len(encoded)))
        dropped = [frozenset[str]()] * len(batch)
        for i, made, kept in zip(good, rendered, keep.tolist()):
            outcomes[i] = next(rows) if kept else NO_SUPERVISED
            if kept and made.dropped:
                dropped[i] = made.dropped
                for name in made.dropped:
                    warnings.dropped[name] = warnings.dropped.get(name, 0) + 1
        self.seconds["read_render_s"] += t1 - t0
        self.seconds["tokenize_s"] += time.perf_counter() - t1
        return Prepared(encoded, supervised, outcomes, formats, warnings, keys, dropped)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TokenizerRef:
    """One tokenizer, named once for every process that loads it: where it is, what it hashes to, the backend
    asked for and the one the first process resolved, and that backend's version. A process that finds another
    file there, or resolves another backend or version, refuses (`load`): every process encodes alike."""

    path: str
    sha256: str
    backend: str = "tokenizers"  # the BackendChoice asked for ("auto" included): the per-process cache's key
    resolved: str = "tokenizers"  # the backend the first process loaded
    version: str | None = None  # that backend's version (None: any; verify's reference tokenizer)
    paranoid: bool = False

    @classmethod
    def of(cls, tokenizer: LoadedTokenizer, asked: str, *, paranoid: bool = False) -> TokenizerRef:
        """The reference to a tokenizer this process loaded (by absolute path: a Ray worker runs elsewhere)."""
        return cls(os.path.abspath(tokenizer.source), tokenizer.sha256, asked, tokenizer.backend_name,
                   tokenizer.backend_version, paranoid)

    @classmethod
    def reference(cls, path: str, sha256: str) -> TokenizerRef:
        """The reference backend (``tokenizers``), any version: what verify re-tokenizes with (a fast-path
        fault cannot verify itself)."""
        return cls(path, sha256)

    def load(self, during: str) -> LoadedTokenizer:
        """The tokenizer, loaded once per process (`packcli.tokenizer.load.cached_tokenizer`) and checked.

        Raises:
            PackcliError: another file at ``path`` (it changed while ``during`` ran), or another backend version.
        """
        tok = cached_tokenizer(self.path, backend=self.backend, paranoid=self.paranoid)
        if tok.backend_name != self.resolved:  # ``auto`` resolved otherwise here than there
            tok = cached_tokenizer(self.path, backend=self.resolved, paranoid=self.paranoid)
        self.check(tok, during)
        return tok

    def check(self, tok: LoadedTokenizer, during: str) -> None:
        """Refuse a tokenizer that is not the one referenced (see `load`)."""
        if tok.sha256 != self.sha256:
            raise InputError(f"tokenizer {self.path} changed while {during} ran (sha256 {tok.sha256[:16]}, "
                               f"first loaded {self.sha256[:16]})", f"run {during} again")
        if self.version is not None and tok.backend_version != self.version:
            raise PackcliError(f"this worker has {tok.backend_name} {tok.backend_version}; the driver resolved "
                               f"{self.version}", "install the same version on every node")


@dataclass(frozen=True)
class PrepareSpec:
    """How records become examples, in full: the tokenizer, the template, the policies, the column mapping.
    Hashable and picklable, so a worker process builds the same `Preparer` (`preparer_for`); pack, stats
    and verify each describe their preparer with one."""

    tokenizer: TokenizerRef
    template_text: str  # the template the driver resolved: every worker renders with exactly it
    template_source: str
    template_date: str  # ISO date that strftime_now formats
    loss: str
    input_format: str
    fields: tuple[tuple[str, str], ...] = ()  # the column mapping, as `FieldMap.renames` items (hashable)
    keys: bool = False  # compute content keys (--dedupe exact)
    text_bos: str = "auto"  # a text record's BOS and EOS (`packcli.tokenizer.ends.text_ends`)
    text_eos: str = "auto"
    allow_dropped: tuple[str, ...] = ()  # fields the template may drop (--allow-dropped-fields)
    render_engine: str = "jinja2"  # the engine the driver chose (`packcli.chat.engines.choose_engine`)
    # The BOS and EOS tokens the template renders with: None, the tokenizer's own; verify renders with the pinned
    # ones (its drift check proves them the tokenizer's).
    ends: tuple[str | None, str | None] | None = None

    def absolute(self) -> PrepareSpec:
        """This spec with its tokenizer named by absolute path (`packcli.engine.Engine.shares_paths`)."""
        return replace(self, tokenizer=replace(self.tokenizer, path=os.path.abspath(self.tokenizer.path)))

    def build_preparer(self, during: str, tokenizer: LoadedTokenizer | None = None) -> Preparer:
        """The preparer: ``tokenizer`` (this process's, already loaded) or the referenced one, loaded and checked
        (`TokenizerRef.load`; ``during`` names the command in its refusal)."""
        if tokenizer is None:
            tokenizer = self.tokenizer.load(during)
        else:
            self.tokenizer.check(tokenizer, during)
        bos, eos = self.ends if self.ends is not None else (tokenizer.bos_token, tokenizer.eos_token)
        renderer = Renderer(ChatTemplate(self.template_text, self.template_source), LossPolicy(self.loss),
                            bos_token=bos, eos_token=eos, template_date=date.fromisoformat(self.template_date),
                            text_ends=text_ends(tokenizer, self.text_bos, self.text_eos),
                            allow_dropped=frozenset(self.allow_dropped), engine=self.render_engine)
        return Preparer(renderer, tokenizer, Format(self.input_format), FieldMap.of(dict(self.fields)), keys=self.keys)


class PreparerJob(Protocol):
    """A hashable, picklable description of a preparer that a worker process can build."""

    def build_preparer(self) -> Preparer: ...


_PREPARERS: dict[PreparerJob, Preparer] = {}


def preparer_for(job: PreparerJob) -> Preparer:
    """This process's preparer for ``job``: built once per process, or the one `share_preparer` left."""
    found = _PREPARERS.get(job)
    if found is None:
        found = _PREPARERS[job] = job.build_preparer()
    return found


def share_preparer(job: PreparerJob, preparer: Preparer | None) -> None:
    """Let this process's units of ``job`` use ``preparer`` (the driver's, already loaded); None forgets it."""
    if preparer is None:
        _PREPARERS.pop(job, None)
    else:
        _PREPARERS[job] = preparer
