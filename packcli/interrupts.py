"""SIGINT and SIGTERM: a command stops through its cleanup code, and a step that must not be split waits.

The CLI turns both signals into `packcli.errors.Interrupted`, a KeyboardInterrupt
(`raise_on_signals`), so SIGTERM (a job scheduler, ``timeout``, ``docker stop``) goes through the
same ``finally`` and ``except BaseException`` blocks as Ctrl-C: the run's temporary artifact and
worker processes go, finished units stay. A second signal while that cleanup runs is ignored: the
cleanup is short, and cut halfway it would leave what it was removing. A signal that was ignored
when packcli started (``nohup``, a background job of a non-interactive shell) stays ignored.

`signals_held` defers both signals around a step that must not be split (``--force`` moving the old
artifact aside and the new one in), then delivers them as they would have been.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from packcli.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def raise_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted` once (then are ignored); outside, as before."""
    if not _in_main_thread():  # signal handlers can only be set from the main thread
        yield
        return
    raised = False

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Interrupted(signum)

    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s, handler in previous.items():
        if handler is not signal.SIG_IGN and handler is not None:
            signal.signal(s, interrupt)
    try:
        yield
    finally:
        for s, handler in previous.items():
            if handler is not signal.SIG_IGN and handler is not None:
                signal.signal(s, handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive within the block are delivered when it ends, in the order they came."""
    if not _in_main_thread():
        yield
        return
    pending: list[int] = []
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    held = [s for s, handler in previous.items() if handler is not signal.SIG_IGN and handler is not None]
    for s in held:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s in held:
            signal.signal(s, previous[s])
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)
