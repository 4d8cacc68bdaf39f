"""Everything one ``packcli verify`` asks for, checked before any work and run as one call.

`verify_artifact` proves the artifact's invariants; a verify run may also ask for the attention check,
the consumers' collators, the seam table with a status per example, or the self-test on corrupted
copies. `VerifyRequest` holds those choices, `VerifyRequest.problems` names every bad one at once (by
parameter: the CLI prints its flags) before the artifact is read, so a typo in ``attention`` does not
wait for reconstruction, and `run_request` runs what was asked, in the order the report is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packcli.choices import EngineName
from packcli.progress import NO_PROGRESS, Progress
from packcli.verify.report import VerifyReport


@dataclass(frozen=True)
class VerifyRequest:
    """What a verify run checks and writes: `verify_artifact`'s arguments, and the optional checks."""

    directory: Path
    tokenizer: str | None = None
    template: str | None = None
    source_root: Path | None = None
    reconstruct: bool = True
    max_violations: int = 20
    workers: int | None = None
    render_oracle: str | None = None
    sample: int | None = None
    attention: tuple[str, ...] | None = None  # backends; None: no attention check
    device: str = "cpu"
    dtype: str = "float32"
    packs: int = 4
    grads: bool = True
    consumers: tuple[str, ...] = ()
    consumer_packs: int | None = None
    seam_out: str | None = None
    self_test: bool = False
    engine: EngineName = EngineName.local
    ray_address: str | None = None
    shared_fs: bool = False
    scratch_dir: Path | None = None

    def problems(self) -> list[str]:
        """Every bad choice, each naming its parameter (nothing is read but the filesystem)."""
        from packcli.checks import (
            directory_problems,
            int_problems,
            output_file_problems,
            scratch_dir_problems,
            template_problems,
            tokenizer_problems,
        )
        from packcli.engine import worker_problems

        problems = directory_problems("`directory`", self.directory)
        problems += directory_problems("`source_root`", self.source_root)
        problems += scratch_dir_problems("`scratch_dir`", self.scratch_dir, self.directory)
        problems += tokenizer_problems("`tokenizer`", self.tokenizer) + template_problems(self.template, self.tokenizer)
        problems += int_problems("`packs`", self.packs, 1, 1_000_000)
        problems += int_problems("`max_violations`", self.max_violations, 0)
        problems += worker_problems(self.workers, self.engine, ray_address=self.ray_address, shared_fs=self.shared_fs)
        problems += int_problems("`consumer_packs`", self.consumer_packs, 1) + int_problems("`sample`", self.sample, 1)
        if self.sample is not None and self.render_oracle is None:
            problems.append("`sample` picks the records `render_oracle` checks; pass `render_oracle` too")
        problems += output_file_problems("`seam_out`", self.seam_out, (".parquet", ".csv"))
        if self.self_test and (self.attention is not None or self.seam_out or self.render_oracle
                               or self.engine is not EngineName.local):
            problems.append("`self_test` runs its own checks, here; leave out `attention`, `render_oracle`, "
                            "`seam_out` and `engine`")
        if self.attention is not None and not self.attention:
            problems.append("`attention` names no backend")
        return problems

    def check(self) -> None:
        """Raise on the first kind of problem: bad choices (all named at once), then an oracle or an attention
        backend that cannot run here (never a fallback).

        Raises:
            PackcliError: a usage error naming every bad choice, or what is missing to run a chosen check.
        """
        from packcli.checks import raise_all

        raise_all(self.problems())
        if self.render_oracle:
            from packcli.verify.oracle import require_oracle

            require_oracle(self.render_oracle)
        if self.attention:
            from packcli.verify.attention import resolve_backends

            resolve_backends(list(self.attention), device=self.device, dtype=self.dtype, check_grads=self.grads)


@dataclass
class VerifyOutcome:
    """What a verify run found: the invariants' report, and the optional checks' (None or empty when not
    asked). A self-test run has its fault results only."""

    report: VerifyReport | None = None
    attention: object | None = None  # AttentionReport, imported lazily
    consumers: list = field(default_factory=list)  # ConsumerReport each
    self_test: list | None = None  # FaultResult each

    @property
    def ok(self) -> bool:
        if self.self_test is not None:
            return all(r.caught or not r.applies for r in self.self_test)
        return (self.report is not None and self.report.ok and (self.attention is None or self.attention.ok)
                and all(c.ok for c in self.consumers))


def run_request(request: VerifyRequest, progress: Progress = NO_PROGRESS) -> VerifyOutcome:
    """Check ``request`` (`VerifyRequest.check`), then run what it asks; the seam table with statuses is
    written last, from the report.

    Raises:
        PackcliError: a bad request, a missing source or tokenizer, or a check that cannot run here.
    """
    request.check()
    if request.self_test:
        from packcli.owned import scratch_folder
        from packcli.verify.faults import run_self_test

        with scratch_folder("packcli-selftest-", "verify's self-test: corrupted copies of the artifact",
                            request.scratch_dir) as ws:
            return VerifyOutcome(self_test=run_self_test(request.directory, str(ws), source_root=request.source_root))
    from packcli.verify.suite import attention_check, verify_artifact

    engine = None
    if request.engine is EngineName.ray:
        from packcli.engine import make_engine

        engine = make_engine(request.engine, workers=request.workers, address=request.ray_address,
                             shared_fs=request.shared_fs, shared="the artifact, the sources and the tokenizer")
    outcome = VerifyOutcome(verify_artifact(
        request.directory, tokenizer=request.tokenizer, template=request.template, source_root=request.source_root,
        reconstruct=request.reconstruct, max_violations=request.max_violations, progress=progress,
        workers=request.workers, render_oracle=request.render_oracle, sample=request.sample, engine=engine,
        scratch_dir=request.scratch_dir))
    if request.attention:
        outcome.attention = attention_check(request.directory, list(request.attention), device=request.device,
                                            dtype=request.dtype, packs=request.packs, check_grads=request.grads)
    for name in request.consumers:
        from packcli.verify.consumer import check_consumer

        outcome.consumers.append(check_consumer(request.directory, name, max_packs=request.consumer_packs,
                                                max_violations=request.max_violations))
    if request.seam_out:
        from packcli.verify.report import write_seam_status

        write_seam_status(outcome.report, str(request.directory), request.seam_out)
    return outcome
