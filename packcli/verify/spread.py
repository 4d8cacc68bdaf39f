"""Checks judged a partition at a time on an engine's workers (``verify --engine ray``): the one way verify
hands partitions out, so that the driver never holds more of them than the engine has in flight.
`packcli.verify.bookkeeping` partitions by example id, `packcli.verify.copies` by input and line."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from packcli.engine import Engine

SLICE = 1 << 20  # rows a partition label is computed for at a time: its temporaries stay this small


def map_parts(engine: Engine | None, fn: Callable, common: object, parts: int, build: Callable[[int], object]) -> list:
    """``fn(common, build(p))`` for every partition ``p`` on ``engine`` (None: here, one after the other),
    results in partition order; a partition is built when the engine hands it out (`Lazy`)."""
    if engine is None:
        return [fn(common, build(p)) for p in range(parts)]
    with engine.session():
        return engine.map(fn, common, Lazy(build, parts))


class Lazy(Sequence):
    """``build(0)``, ..., ``build(size - 1)``, each built when asked for (an engine asks again for a finished
    item, to hand it to ``on_done``: built twice, held by neither)."""

    def __init__(self, build: Callable[[int], object], size: int) -> None:
        self.build, self.size = build, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, p: int) -> object:  # type: ignore[override] - an index, never a slice
        if not 0 <= p < self.size:
            raise IndexError(p)
        return self.build(p)


def labels(size: int, label: Callable[[int, int], np.ndarray], dtype: npt.DTypeLike) -> np.ndarray:
    """Every row's partition, ``label(a, b)`` for rows ``a`` to ``b`` a `SLICE` at a time: what the driver holds
    while the partitions are handed out is this array alone (two bytes a row, up to 65,536 partitions)."""
    out = np.empty(size, dtype)
    for a in range(0, size, SLICE):
        out[a:a + SLICE] = label(a, min(size, a + SLICE))
    return out
