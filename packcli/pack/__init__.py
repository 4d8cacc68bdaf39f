"""Packing: assign tokenized examples to fixed-capacity packs (see strategies.py for the trade-offs)."""

from packcli.pack.strategies import (
    STRATEGIES,
    LowerBounds,
    PackMetrics,
    PackPlan,
    check_budgets,
    lower_bounds,
    pack_lengths,
)

__all__ = [
    "STRATEGIES",
    "LowerBounds",
    "PackMetrics",
    "PackPlan",
    "check_budgets",
    "lower_bounds",
    "pack_lengths",
]
