"""Validated, frozen configuration for a ``pack`` run.

Every argument is checked before any data is read, and all problems are reported at once, so a
user never waits for tokenization to learn that ``--capacity`` was zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

from packcli.artifact.fieldspec import setting_bounds
from packcli.artifact.manifest import PackSettings
from packcli.checks import (
    float_problems,
    input_problems,
    int_problems,
    raise_all,
    template_problems,
    tokenizer_problems,
)
from packcli.choices import (
    AddToken,
    BackendChoice,
    Dedupe,
    DroppableField,
    Format,
    LossPolicy,
    OnError,
    Overlong,
    RenderBackend,
    Strategy,
)
from packcli.contract import MAX_INT32
from packcli.errors import InputError, PackcliError
from packcli.ingest.fields import DEFAULT_FIELDS, FieldMap
from packcli.mix import MixSpec, parse_mix

__all__ = ["OnError", "Overlong", "PackConfig", "DEFAULT_MAX_REJECT_FRACTION"]

# Records lost (rejected, or dropped as over-long) beyond this fraction fail the run: when most
# records do not make it, the template, the format or the capacity is wrong, and a run that trains
# on the few survivors would hide that. A run that packs nothing fails whatever the budget.
DEFAULT_MAX_REJECT_FRACTION = 0.5


@dataclass(frozen=True)
class PackConfig:
    """Everything that shapes a packed artifact. Fields that shape a seam go into the manifest."""

    inputs: tuple[str, ...]
    tokenizer: str
    out: Path
    capacity: int = 4096
    template: str = "auto"
    template_date: str = "2024-07-26"  # the date strftime_now formats (ISO): the same text on every run
    loss: LossPolicy = LossPolicy.auto
    input_format: Format = Format.auto
    fields: FieldMap = DEFAULT_FIELDS
    text_bos: AddToken = AddToken.auto  # a text document's BOS (`packcli.tokenizer.ends`)
    text_eos: AddToken = AddToken.auto
    dedupe: Dedupe = Dedupe.none
    allow_dropped_fields: tuple[DroppableField, ...] = ()  # fields the template may drop (packed, counted)
    mix: MixSpec | None = None  # a `MixSpec`, or --mix as written (parsed here)
    strategy: Strategy = Strategy.window
    window: int | None = None
    seed: int = 0
    shuffle: bool = True
    shuffle_packs: bool = True
    overlong: Overlong = Overlong.drop
    split_overlap: int = 0  # --overlong split: tokens a chunk repeats from the one before, as context
    split_min_last: int = 1  # --overlong split: a last chunk with fewer tokens of its own is dropped
    on_error: OnError = OnError.skip
    min_density: float | None = None
    max_displacement: float | None = None
    max_reject_fraction: float = DEFAULT_MAX_REJECT_FRACTION
    packs_per_shard: int = 2048
    batch_records: int = 4096
    lines_per_unit: int = 10_000
    tokenizer_backend: BackendChoice = BackendChoice.auto
    paranoid_tokenizer: bool = False
    render_backend: RenderBackend = RenderBackend.auto
    force: bool = False

    def __post_init__(self) -> None:
        choice_problems = []
        # Accept plain strings from Python callers; store the enums.
        for name, kind in (("loss", LossPolicy), ("input_format", Format), ("overlong", Overlong), ("on_error", OnError),
                           ("strategy", Strategy), ("tokenizer_backend", BackendChoice), ("dedupe", Dedupe),
                           ("render_backend", RenderBackend),
                           ("text_bos", AddToken), ("text_eos", AddToken)):
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                choices = ", ".join(k.value for k in kind)
                choice_problems.append(f"`{name}` must be one of {choices}, got {getattr(self, name)!r}")
        try:
            allowed = tuple(sorted({DroppableField(f) for f in self.allow_dropped_fields}, key=lambda f: f.value))
            object.__setattr__(self, "allow_dropped_fields", allowed)
        except ValueError:
            choices = ", ".join(f.value for f in DroppableField)
            choice_problems.append(f"`allow_dropped_fields` must name {choices}, got {self.allow_dropped_fields!r}")
        if isinstance(self.fields, dict):
            object.__setattr__(self, "fields", FieldMap(**self.fields))
        choice_problems += self.fields.problems()
        if isinstance(self.mix, str):
            spec, mix_problems = parse_mix(self.mix)
            object.__setattr__(self, "mix", spec)
            choice_problems += mix_problems
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "inputs", tuple(str(i) for i in self.inputs))
        problems = []
        if not self.inputs:
            problems.append("no input files given")
        if not self.tokenizer:
            problems.append("no tokenizer given (`tokenizer`)")
        # The settings the manifest pins take the range every reader of it accepts (`setting_bounds`).
        problems += int_problems("`capacity`", self.capacity, *setting_bounds("capacity"))
        problems += int_problems("`window`", self.window, *setting_bounds("window"))
        problems += self._split_problems()
        problems += int_problems("`seed`", self.seed, *setting_bounds("seed"))
        # a density budget of 0 asks for nothing: pack refuses it, though a manifest's reader could hold one
        problems += float_problems("`min_density`", self.min_density, *setting_bounds("min_density"), low_open=True)
        problems += float_problems("`max_displacement`", self.max_displacement, *setting_bounds("max_displacement"))
        problems += float_problems("`max_reject_fraction`", self.max_reject_fraction,
                                   *setting_bounds("max_reject_fraction"))
        problems += int_problems("`packs_per_shard`", self.packs_per_shard, *setting_bounds("packs_per_shard"))
        problems += int_problems("`lines_per_unit`", self.lines_per_unit, 1)
        problems += int_problems("batch_records", self.batch_records, 1)
        if not problems and self.capacity * self.packs_per_shard > MAX_INT32:
            # A shard's list columns have int32 offsets: its tokens must fit, packs full or not.
            problems.append(f"`capacity` {self.capacity:,} x `packs_per_shard` {self.packs_per_shard:,} tokens do "
                            f"not fit one shard (at most {MAX_INT32:,}); lower `packs_per_shard`")
        try:
            date.fromisoformat(self.template_date)
        except (TypeError, ValueError):
            problems.append(f"`template_date` must be a date as YYYY-MM-DD, got {self.template_date!r}")
        problems += choice_problems
        if problems:
            raise PackcliError("invalid configuration: " + "; ".join(problems))

    def _split_problems(self) -> list[str]:
        """The split options: integers, only with ``--overlong split``, and within `SplitRule.problems`."""
        from packcli.job.chunks import SplitRule

        problems = int_problems("`split_overlap`", self.split_overlap, *setting_bounds("split_overlap")) + int_problems(
            "`split_min_last`", self.split_min_last, *setting_bounds("split_min_last"))
        if problems or int_problems("`capacity`", self.capacity, *setting_bounds("capacity")):
            return problems
        if self.overlong != Overlong.split.value and (self.split_overlap, self.split_min_last) != (0, 1):
            return ["`split_overlap` and `split_min_last` need `overlong='split'`"]
        return SplitRule(self.capacity, self.split_overlap, self.split_min_last).problems()

    def file_problems(self) -> list[str]:
        """What is wrong with the paths: the inputs, the tokenizer and a template file must exist, and
        ``out`` must be a folder packcli may write or replace (`packcli.job.workspace.out_problems`)."""
        from packcli.job.workspace import out_problems  # here: the job package imports this module

        return (input_problems(self.inputs) + tokenizer_problems("`tokenizer`", self.tokenizer)
                + template_problems(self.template, self.tokenizer)
                + out_problems(self.out, force=self.force, inputs=self.read_paths()))

    def read_paths(self) -> tuple[str, ...]:
        """Every path the run reads (inputs, tokenizer, a template file): none may be inside ``out``."""
        return (*self.inputs, self.tokenizer, *([self.template] if self.template not in ("auto", "chatml") else []))

    def check_files(self) -> None:
        """`file_problems`, raised: `packcli.job.run.pack_corpus` calls it before any work.

        Raises:
            InputError: every path problem at once (exit 2).
        """
        raise_all(self.file_problems(), error=InputError)

    def settings(self, mix: dict | None = None) -> PackSettings:
        """The settings that decide where seams fall and what carries loss (the manifest's ``config``), with
        ``window`` resolved to the one the strategy packs with (`packcli.pack.strategies.resolved_window`) and ``mix``
        the run's mixture as the manifest pins it (`packcli.mix.Mixture.to_manifest`)."""
        from packcli.pack.strategies import resolved_window  # here: the CLI's start-up imports no numpy

        return PackSettings(
            capacity=self.capacity, loss=self.loss.value, input_format=self.input_format.value,
            strategy=self.strategy.value, window=resolved_window(self.strategy.value, self.window), seed=self.seed,
            shuffle=self.shuffle, shuffle_packs=self.shuffle_packs, overlong=self.overlong.value,
            split_overlap=self.split_overlap, split_min_last=self.split_min_last, min_density=self.min_density,
            max_displacement=self.max_displacement, max_reject_fraction=self.max_reject_fraction,
            packs_per_shard=self.packs_per_shard, template_date=self.template_date, dedupe=self.dedupe.value,
            text_bos=self.text_bos.value, text_eos=self.text_eos.value, fields=self.fields.renames(), mix=mix,
            # written only when given: artifacts packed without it keep their bytes
            allow_dropped_fields=tuple(self.allowed_dropped()) if self.allow_dropped_fields else None)

    def allowed_dropped(self) -> list[str]:
        """``--allow-dropped-fields`` as the manifest pins it: field names, sorted."""
        return [f.value for f in self.allow_dropped_fields]
