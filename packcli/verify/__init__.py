"""Verification: invariants of packed buffers and proof that nothing crosses a seam.

``verify_artifact`` is resolved lazily so that importing ``packcli.verify.attention`` does not pull
in pyarrow and the artifact readers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["verify_artifact"]


def __getattr__(name: str) -> Any:
    if name == "verify_artifact":
        from packcli.verify.artifact import verify_artifact

        return verify_artifact
    raise AttributeError(f"module 'packcli.verify' has no attribute {name!r}")
