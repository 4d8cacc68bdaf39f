"""Which record first carried each content key, as reconstruction meets the records in pack's order.

With ``--dedupe exact`` a record is a duplicate exactly when an earlier record has its content key
(`packcli.ingest.content_key`, 16 bytes), and its seam-table reason names that earlier record. Verify meets
the records a unit at a time, in order, so it needs, per key, the first record seen with it. A dict from key
to record would hold two Python objects a distinct record (over 100 bytes); `FirstSeen` keeps the keys as
sorted runs of fixed-width values with the first record's input and line beside them (24 bytes a distinct
key), merged two runs of like size at a time as a binary counter carries: adding n keys costs O(n log n)
and a lookup one binary search a run, over at most log2 of the runs' count.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

KEY = np.dtype("V16")


class FirstSeen:
    """The first record (its input and line) to carry each content key, over batches added in record order."""

    def __init__(self) -> None:
        self.runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # sorted keys, their first input and line

    def add(self, keys: npt.NDArray[np.void], inputs: npt.NDArray[np.int32],
            lines: npt.NDArray[np.int32]) -> tuple[np.ndarray, np.ndarray]:
        """Add the next records (``keys`` in record order, each record's input and line); returns, per record, the
        input and line of the first record with its key: one added earlier, an earlier one of these, or itself."""
        keys = np.ascontiguousarray(keys, KEY)
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        first_input, first_line = np.asarray(inputs, np.int32)[first], np.asarray(lines, np.int32)[first]
        known = np.zeros(len(distinct), dtype=bool)
        for run_keys, run_inputs, run_lines in self.runs:  # a key is in one run at most: only new keys are kept
            at = np.minimum(np.searchsorted(run_keys, distinct), max(len(run_keys) - 1, 0))
            hit = (run_keys[at] == distinct) if len(run_keys) else np.zeros(len(distinct), dtype=bool)
            first_input[hit], first_line[hit] = run_inputs[at[hit]], run_lines[at[hit]]
            known |= hit
        self._push(distinct[~known], first_input[~known], first_line[~known])
        return first_input[inverse.ravel()], first_line[inverse.ravel()]

    def _push(self, keys: np.ndarray, inputs: np.ndarray, lines: np.ndarray) -> None:
        """A sorted run of new keys; then the last two runs merged while the one before is no longer than the last."""
        if not len(keys):
            return
        self.runs.append((keys, inputs, lines))
        while len(self.runs) > 1 and len(self.runs[-2][0]) <= len(self.runs[-1][0]):
            (a, ai, al), (b, bi, bl) = self.runs.pop(-2), self.runs.pop()
            merged = np.concatenate([a, b])
            order = np.argsort(merged, kind="stable")
            self.runs.append((merged[order], np.concatenate([ai, bi])[order], np.concatenate([al, bl])[order]))

    @property
    def size(self) -> int:
        """Distinct keys held."""
        return sum(len(run[0]) for run in self.runs)
