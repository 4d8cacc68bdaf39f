"""Verification: invariants of packed buffers and proof that nothing crosses a seam.

    run.py          `verify_artifact`: every check below, in order, into one report
    integrity.py    hashes, schema, rows: the artifact is what its manifest says
    drift.py        the pinned tokenizer and template still hash as pinned
    layout.py       per pack: seams, positions, first labels, supervised labels
    bookkeeping.py  every example exactly once, where the seam table says; counts add up
    copies.py       every record has the copies its mixture gives it (one without --mix)
    reconstruct.py  every source record re-tokenized with the reference and compared
    faults.py       `--self-test`: seeded faults, each of which must be caught
    attention/      packed == alone through real attention backends (torch)
    report.py       the report: checks, violations, the seam table with a verify column

``verify_artifact`` is resolved lazily so that importing ``packcli.verify.attention`` does not pull
in pyarrow and the artifact readers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["verify_artifact"]


def __getattr__(name: str) -> Any:
    if name == "verify_artifact":
        from packcli.verify.run import verify_artifact

        return verify_artifact
    raise AttributeError(f"module 'packcli.verify' has no attribute {name!r}")
