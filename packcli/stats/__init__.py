"""``packcli stats``: three jobs, one module each.

- `packcli.stats.inputs`: raw data tokenized as ``pack`` would, kept as lengths (`length_stats`).
- `packcli.stats.whatif`: what each capacity, strategy and over-long policy would give (`sweep`, `recommend`).
- `packcli.stats.packed`: what a packed artifact holds (`artifact_stats`).
"""

from packcli.stats.inputs import LengthStats, Quantiles, length_stats, length_stats_problems, terminal_histogram
from packcli.stats.packed import ArtifactStats, artifact_stats, input_counts
from packcli.stats.whatif import (
    DEFAULT_CAPACITIES,
    PolicyWhatIf,
    Recommendation,
    WhatIf,
    overlong_sweep,
    recommend,
    sweep,
    what_if,
)

__all__ = ["DEFAULT_CAPACITIES", "ArtifactStats", "LengthStats", "PolicyWhatIf", "Quantiles", "Recommendation",
           "WhatIf", "artifact_stats", "input_counts", "length_stats", "length_stats_problems", "overlong_sweep",
           "recommend", "sweep", "terminal_histogram", "what_if"]
