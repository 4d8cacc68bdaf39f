"""Validated, frozen configuration for a ``pack`` run.

Every argument is checked before any data is read, and all problems are reported at once, so a
user never waits for tokenization to learn that ``--capacity`` was zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date
from enum import Enum
from pathlib import Path

from packcli.choices import (
    BackendChoice,
    Format,
    LossPolicy,
    OnError,
    Overlong,
    Strategy,
)
from packcli.errors import PackcliError

__all__ = ["OnError", "Overlong", "PackConfig"]


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
    strategy: Strategy = Strategy.window
    window: int | None = None
    seed: int = 0
    shuffle: bool = True
    shuffle_packs: bool = True
    overlong: Overlong = Overlong.drop
    on_error: OnError = OnError.skip
    min_density: float | None = None
    max_displacement: float | None = None
    packs_per_shard: int = 2048
    batch_records: int = 4096
    lines_per_unit: int = 10_000
    tokenizer_backend: BackendChoice = BackendChoice.auto
    paranoid_tokenizer: bool = False
    force: bool = False

    def __post_init__(self) -> None:
        choice_problems = []
        # Accept plain strings from Python callers; store the enums.
        for name, kind in (("loss", LossPolicy), ("input_format", Format), ("overlong", Overlong), ("on_error", OnError),
                           ("strategy", Strategy), ("tokenizer_backend", BackendChoice)):
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                choices = ", ".join(k.value for k in kind)
                flag = "--format" if name == "input_format" else f"--{name.replace('_', '-')}"
                choice_problems.append(f"{flag} must be one of {choices}, got {getattr(self, name)!r}")
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "inputs", tuple(str(i) for i in self.inputs))
        problems = []
        if not self.inputs:
            problems.append("no input files given")
        if self.capacity < 2:
            problems.append(f"--capacity must be at least 2, got {self.capacity}")
        if self.window is not None and self.window < 1:
            problems.append(f"--window must be positive, got {self.window}")
        if self.min_density is not None and not 0 < self.min_density <= 1:
            problems.append(f"--min-density must be in (0, 1], got {self.min_density}")
        if self.max_displacement is not None and self.max_displacement < 0:
            problems.append(f"--max-displacement must be >= 0, got {self.max_displacement}")
        if self.packs_per_shard < 1:
            problems.append(f"--packs-per-shard must be positive, got {self.packs_per_shard}")
        if self.lines_per_unit < 1:
            problems.append(f"--unit-lines must be positive, got {self.lines_per_unit}")
        try:
            date.fromisoformat(self.template_date)
        except (TypeError, ValueError):
            problems.append(f"--template-date must be a date as YYYY-MM-DD, got {self.template_date!r}")
        if self.batch_records < 1:
            problems.append(f"batch size must be positive, got {self.batch_records}")
        problems += choice_problems
        if problems:
            raise PackcliError("invalid configuration: " + "; ".join(problems))

    def seam_settings(self) -> dict:
        """The settings that decide where seams fall and what carries loss (pinned in the manifest)."""
        data = asdict(self)
        keep = ("capacity", "loss", "input_format", "strategy", "window", "seed", "shuffle", "shuffle_packs",
                "overlong", "min_density", "max_displacement", "packs_per_shard", "template_date")
        return {k: (v.value if isinstance(v, Enum) else v) for k, v in data.items() if k in keep}
