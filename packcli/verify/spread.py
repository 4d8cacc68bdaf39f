"""Checks judged a partition at a time on an engine's workers (``verify --engine ray``): the one way verify
hands partitions out, so that the driver never holds more of them than the engine has in flight.
`packcli.verify.bookkeeping` partitions by example id, `packcli.verify.copies` by input and line."""

from __future__ import annotations

import threading
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


def each_part(engine: Engine | None, fn: Callable, common: object, parts: int, build: Callable[[int], object],
              take: Callable[[object], None]) -> None:
    """``take(fn(common, build(p)))`` for every partition ``p``, in partition order (on ``engine``; None: here, one
    after the other). The engine's results come back in any order: one that finishes ahead of its turn waits here
    until the results before it are taken, so the driver holds those few, never every partition's result at once
    (`map_parts` returns them all)."""
    if engine is None:
        for p in range(parts):
            take(fn(common, build(p)))
        return
    waiting: dict[int, object] = {}
    turn, lock = [0], threading.Lock()

    def done(_: object, numbered: tuple[int, object]) -> None:
        with lock:
            waiting[numbered[0]] = numbered[1]
            while turn[0] in waiting:
                take(waiting.pop(turn[0]))
                turn[0] += 1

    with engine.session():
        engine.map(_numbered, (fn, common), Lazy(lambda p: (p, build(p)), parts), done, keep=False)


def _numbered(common: tuple[Callable, object], item: tuple[int, object]) -> tuple[int, object]:
    """A task of `each_part`: its partition's number, and ``fn``'s result on it."""
    fn, shared = common
    p, part = item
    return p, fn(shared, part)


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
