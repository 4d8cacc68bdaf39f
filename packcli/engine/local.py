"""The local engine: units one after another in this process (the tokenizer uses every core)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from packcli.units import UnitIndex, UnitJob, UnitSpec, run_unit


class LocalEngine:
    name = "local"

    def run(self, job: UnitJob, specs: Sequence[UnitSpec], on_done: Callable[[UnitSpec], None]) -> list[UnitIndex]:
        results = []
        for spec in specs:
            results.append(run_unit(job, spec))
            on_done(spec)
        return results
