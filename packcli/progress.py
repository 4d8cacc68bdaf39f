"""How the library reports progress without knowing who listens.

Long stages call `Progress.start` and `Progress.advance`; the CLI passes a rich bar
(`packcli.cli.console.RichProgress`), a Python caller passes nothing and gets `NO_PROGRESS`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol


class Progress(Protocol):
    """A progress reporter: named tasks with totals, advanced as work finishes."""

    def start(self, key: str, description: str, total: float | None) -> None: ...

    def advance(self, key: str, amount: float = 1) -> None: ...

    def running(self) -> contextlib.AbstractContextManager[object]: ...


class _Silent:
    """Reports nothing."""

    def start(self, key: str, description: str, total: float | None) -> None:
        pass

    def advance(self, key: str, amount: float = 1) -> None:
        pass

    @contextlib.contextmanager
    def running(self) -> Iterator[_Silent]:
        yield self


NO_PROGRESS: Progress = _Silent()
