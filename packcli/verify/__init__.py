"""Verification: invariants of packed buffers and proof that nothing crosses a seam.

    suite.py        `verify_artifact`: every check below, in order, into one report
    request.py      a verify run's choices (the optional checks too), checked at once and run
    owners.py       who proves what: every hashed manifest field and column, and its owning check
    integrity.py    hashes, schema, rows: the artifact is what its manifest says
    drift.py        the pinned tokenizer and template still hash as pinned
    locate.py       where the sources, tokenizer and template are now
    layout.py       per pack: seams, positions, first labels, supervised labels
    bookkeeping.py  the seam table and the packs as a bijection; counts add up
    copies.py       every record has the copies its mixture gives it (one without --mix)
    reconstruct.py  every source record re-tokenized with the reference and compared
    spread.py       partitions of the bookkeeping handed to an engine's workers one at a time
    columns.py      the seam table as numpy columns, a row group at a time
    packs.py        the packs' segments as columns, read from each shard as integrity reads it
    chunking.py     split examples: the seam table's chunk rows against the re-derived cut
    replan.py       fates, packs and positions re-derived with pack's own planner
    oracle.py       ``--render-oracle``: every example rendered again by transformers
    consumer.py     ``--consumer``: what a trainer's own collation hands the model
    faults.py       `--self-test`: seeded faults, each of which must be caught
    forge.py        re-sealing what a forger could recompute (the negative controls' tools)
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
        from packcli.verify.suite import verify_artifact

        return verify_artifact
    raise AttributeError(f"module 'packcli.verify' has no attribute {name!r}")
