"""``verify_artifact``: run every check on a packed directory and return one report.

Order: the manifest (every hashed field owned, well-typed, the contract's conventions), integrity
(a shard that fails its hash is still checked structurally when readable, so one corrupted byte does
not hide a broken seam elsewhere) with the per-pack layout of each shard as it is read (one shard in
memory at a time in each process that reads them, `packcli.verify.packs`), contract drift, global bookkeeping, each
record's copies, reconstruction from the sources, and the plan re-derived from the reconstructed lengths.
`packcli.verify.owners` says which of them proves each manifest field and column.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from packcli.artifact import manifest as mf
from packcli.checks import raise_all, scratch_dir_problems
from packcli.engine import Engine
from packcli.errors import DISK_FULL, SYSTEM_REFUSALS, InputError, SystemRefusal
from packcli.job.scratch import Scratch
from packcli.owned import scratch_folder
from packcli.progress import NO_PROGRESS, Progress
from packcli.verify.bookkeeping import check_global
from packcli.verify.copies import check_copies
from packcli.verify.drift import check_drift
from packcli.verify.integrity import check_integrity
from packcli.verify.oracle import check_render_oracle, require_oracle
from packcli.verify.owners import check_manifest
from packcli.verify.reconstruct import check_reconstruction
from packcli.verify.replan import check_plan
from packcli.verify.report import VerifyReport


def verify_artifact(directory: str | Path, *, tokenizer: str | None = None, template: str | None = None,
                    source_root: str | Path | None = None, reconstruct: bool = True, max_violations: int = 20,
                    progress: Progress = NO_PROGRESS, workers: int | None = None, render_oracle: str | None = None,
                    sample: int | None = None, engine: Engine | None = None,
                    scratch_dir: str | Path | None = None) -> VerifyReport:
    """Check every invariant of a ``packcli pack`` artifact.

    Args:
        directory: the artifact (``--out`` of ``pack``).
        tokenizer, template: override where the pinned tokenizer/template are looked for.
        source_root: resolve relative source paths against this directory instead of the cwd.
        reconstruct: re-tokenize every source record and compare (needs the sources and tokenizer);
            without it the plan is re-derived from the seam table's own lengths.
        max_violations: keep at most this many offending examples per check.
        workers: processes for reconstruction (None: one per CPU, at most one per unit of 8,192 lines and
            one per 16 MiB of sources, `packcli.engine.pool.auto_processes`; a compressed source is one unit).
        render_oracle: also render the records with this library (``transformers``) and compare
            (`packcli.verify.oracle`); ``sample`` limits it to that many records, drawn with a fixed seed.
        engine: read and check the shards, recount ``counts``, judge the global bookkeeping and the copies
            partition by partition (`packcli.verify.spread`), and re-tokenize, on this engine instead of this
            process and local ones (``make_engine("ray", ...)``: a Ray cluster, whose nodes must reach the artifact,
            the sources and the tokenizer at the same paths); the report is the same.
        scratch_dir: where verify keeps its per-example columns while it runs (a marked folder it makes there and
            removes; a few hundred bytes an example: docs/benchmarks-pipeline.md, memory); None: the system's
            temporary folder (``$TMPDIR``).

    Raises:
        InputError: the directory, a source or the tokenizer needed for reconstruction is missing.
        ContractError: unreadable manifest or unknown contract version.
    """
    directory = Path(directory)
    root = Path(source_root) if source_root is not None else None
    raise_all(scratch_dir_problems("`scratch_dir`", scratch_dir, directory), error=InputError)  # before any work
    if render_oracle is not None:
        require_oracle(render_oracle)
    data = mf.read_manifest(directory)
    report = VerifyReport(str(directory), manifest_sha256=data.get("manifest_sha256"))
    later = ["integrity", "contract_drift", "pack_layout", "global"] + (["reconstruction"] if reconstruct else [])
    last = ["plan"] + (["render_oracle"] if render_oracle else [])
    with progress.running():
        if not check_manifest(data, report.check("manifest", max_violations)):
            for name in later + last:
                report.check(name).skipped = "the manifest is malformed (see the manifest check)"
            return report
        manifest = mf.Manifest.of(data)  # whole: every field the checks below read is there, of its type
        integrity, drift = report.check("integrity", max_violations), report.check("contract_drift", max_violations)
        layout = report.check("pack_layout", max_violations)
        with verify_scratch(scratch_dir) as scratch:  # every per-example column, mapped: not a memory wall
            with engine.session() if engine is not None else nullcontext():  # one cluster session for every stage
                artifact = check_integrity(directory, manifest, integrity, layout, engine=engine, scratch=scratch)
                tok, text = check_drift(manifest, drift, tokenizer=tokenizer, template=template, source_root=root,
                                        require_tokenizer=reconstruct)
                if artifact.seam is None:
                    for name in later[3:] + ["copies"] + last:
                        report.check(name).skipped = "the seam table is missing or unreadable (see integrity)"
                    return report
                rows = artifact.seam
                check_global(artifact, rows, manifest, report.check("global", max_violations), engine=engine)
                check_copies(rows, manifest, report.check("copies", max_violations), engine=engine, scratch=scratch)
                facts = None
                if reconstruct:
                    result = report.check("reconstruction", max_violations)
                    if tok is None or text is None:
                        result.skipped = "the pinned tokenizer or template changed (see contract_drift)"
                    else:
                        facts = check_reconstruction(manifest, rows, artifact.packs, tok, text, result,
                                                     source_root=root, progress=progress, workers=workers,
                                                     engine=engine, scratch=scratch)
            if not render_oracle:
                artifact.packs.forget_segments()  # the plan check reads the seam table alone: its peak without them
            scratch.release()
            check_plan(manifest, rows, facts, report.check("plan", max_violations), scratch)
            if render_oracle:
                result = report.check("render_oracle", max_violations)
                if tok is None:
                    result.skipped = "the pinned tokenizer was not found or changed (see contract_drift)"
                else:
                    check_render_oracle(manifest, rows, artifact.packs, tok, result, source_root=root, sample=sample)
    return report


@contextmanager
def verify_scratch(scratch_dir: str | Path | None) -> Iterator[Scratch]:
    """The columns' own marked folder under ``scratch_dir`` (None: ``$TMPDIR``), removed after. The disk filling up
    there is a `SystemRefusal` that says where and what to do (verify writes nothing else): its files are
    allocated before they are mapped (`packcli.job.scratch.allocate`), so it is an error, not a crash."""
    where = Path(tempfile.gettempdir()) if scratch_dir is None else Path(scratch_dir)
    try:
        with scratch_folder("packcli-verify-", "verify's per-example columns (packcli.job.scratch)", where) as folder:
            yield Scratch(folder)
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        raise SystemRefusal(f"verify's scratch folder in {where}: {SYSTEM_REFUSALS[exc.errno]}; it removed what it "
                            "wrote there", "free space there, or give `scratch_dir` a folder with room (a few hundred "
                            "bytes an example: docs/benchmarks-pipeline.md, memory)") from None


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
    from packcli.verify.attention import PackArrays
    from packcli.verify.consumer import pinned_packs

    chosen = []
    # the shards the manifest lists, read directly: verify reports integrity (and what else the folder holds) itself
    for pack in pinned_packs(Path(directory), mf.load_manifest(Path(directory)).shards):
        if len(chosen) == limit:
            break
        if len(pack.cu_seqlens) > 2:
            chosen.append(PackArrays(pack.input_ids, pack.labels, pack.position_ids, pack.cu_seqlens))
    return chosen
