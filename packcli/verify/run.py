"""``verify_artifact``: run every check on a packed directory and return one report.

Order: integrity first (a shard that fails its hash is still checked structurally when readable, so
one corrupted byte does not hide a broken seam elsewhere), then contract drift, per-pack layout,
global bookkeeping, each record's copies, and reconstruction from the sources.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from packcli.artifact import manifest as mf
from packcli.errors import InputError
from packcli.progress import NO_PROGRESS, Progress
from packcli.verify.bookkeeping import check_global
from packcli.verify.copies import check_copies
from packcli.verify.drift import check_drift
from packcli.verify.integrity import check_integrity
from packcli.verify.layout import check_packs
from packcli.verify.reconstruct import check_reconstruction
from packcli.verify.report import VerifyReport


def verify_artifact(directory: str | Path, *, tokenizer: str | None = None, template: str | None = None,
                    source_root: str | Path | None = None, reconstruct: bool = True, max_violations: int = 20,
                    progress: Progress = NO_PROGRESS, workers: int | None = None) -> VerifyReport:
    """Check every invariant of a ``packcli pack`` artifact.

    Args:
        directory: the artifact (``--out`` of ``pack``).
        tokenizer, template: override where the pinned tokenizer/template are looked for.
        source_root: resolve relative source paths against this directory instead of the cwd.
        reconstruct: re-tokenize every source record and compare (needs the sources and tokenizer).
        max_violations: keep at most this many offending examples per check.
        workers: processes for reconstruction (None: one per CPU for artifacts of at least 16,384
            records in more than one unit of 8,192 lines; a compressed source is one unit).

    Raises:
        InputError: the directory, a source or the tokenizer needed for reconstruction is missing.
        ContractError: unreadable manifest or unknown contract version.
    """
    directory = Path(directory)
    root = Path(source_root) if source_root is not None else None
    manifest = mf.read_manifest(directory)
    report = VerifyReport(str(directory), manifest_sha256=manifest.get("manifest_sha256"))
    with progress.running():
        shards = check_integrity(directory, manifest, report.check("integrity", max_violations))
        tok, text = check_drift(manifest, report.check("contract_drift", max_violations), tokenizer=tokenizer,
                                template=template, source_root=root, require_tokenizer=reconstruct)
        check_packs(shards, manifest["config"]["capacity"], report.check("pack_layout", max_violations))
        seam_path = directory / manifest["seam_table"]["name"]
        if not seam_path.is_file():
            raise InputError(f"{seam_path}: missing; the artifact is incomplete")
        seam = pq.read_table(seam_path)
        check_global(shards, seam, manifest, report.check("global", max_violations))
        check_copies(seam, manifest, report.check("copies", max_violations))
        if reconstruct:
            result = report.check("reconstruction", max_violations)
            if tok is None or text is None:
                result.skipped = "the pinned tokenizer or template changed (see contract_drift)"
            else:
                check_reconstruction(manifest, seam, shards, tok, text, result, source_root=root, progress=progress,
                                     workers=workers)
    return report


def attention_check(directory: str | Path, backends: list[str], *, device: str = "cpu", dtype: str = "float32",
                    packs: int = 4, check_grads: bool = True):  # noqa: ANN201 - AttentionReport, imported lazily
    """Prove packed == alone for the first ``packs`` packs with a seam, through each backend.

    Raises:
        PackcliError: torch missing, or a backend that cannot run on this device/dtype (never a fallback).
    """
    from packcli.verify.attention import check_packs

    return check_packs(packs_with_seams(directory, packs), backends=backends, device=device, dtype=dtype,
                       check_grads=check_grads)


def packs_with_seams(directory: str | Path, limit: int) -> list:  # list[PackArrays], imported lazily
    """The first ``limit`` packs of an artifact that hold more than one example: a pack without a
    seam cannot show a leak, so the attention check spends its time on these."""
    from packcli.data import iter_packs
    from packcli.verify.attention import PackArrays

    chosen = []
    for pack in iter_packs(directory, check_hashes=False):  # verify reports integrity itself
        if len(chosen) == limit:
            break
        if len(pack.cu_seqlens) > 2:
            chosen.append(PackArrays(pack.input_ids, pack.labels, pack.position_ids, pack.cu_seqlens))
    return chosen
