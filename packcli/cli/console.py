"""One place for terminal output: progress and logs on stderr, results on stdout.

The only module that knows rich's progress bars: `RichProgress` implements the library's
`packcli.progress.Progress`. Bars only appear on a terminal, so CI logs and ``--json`` stay clean.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Console

err = Console(stderr=True)
out = Console(highlight=False)


def print_json(data: Any) -> None:
    """Write ``data`` as JSON on stdout (sorted keys, so scripts can diff outputs)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


class RichProgress:
    """`packcli.progress.Progress` as a rich bar on a TTY, silence elsewhere."""

    def __init__(self, enabled: bool) -> None:
        self._bar = None
        self._tasks: dict[str, Any] = {}
        if enabled and err.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=err, transient=True,
            )

    def start(self, key: str, description: str, total: float | None) -> None:
        if self._bar is not None:
            self._tasks[key] = self._bar.add_task(description, total=total)

    def advance(self, key: str, amount: float = 1) -> None:
        if self._bar is not None and key in self._tasks:
            self._bar.advance(self._tasks[key], amount)

    @contextlib.contextmanager
    def running(self) -> Iterator[RichProgress]:
        if self._bar is None:
            yield self
            return
        with self._bar:
            yield self

