"""The ``pack`` job (`pack_corpus`): see `packcli.job.run` for its stages and design.

``pack_corpus`` is resolved lazily: ``verify`` plans and reads units (`packcli.job.units`) without
the packing kernels that `packcli.job.run` imports (numba: a second of start-up on a small artifact).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PackSummary", "pack_corpus"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from packcli.job import run

        return getattr(run, name)
    raise AttributeError(f"module 'packcli.job' has no attribute {name!r}")
