"""``packcli verify``: check every invariant of a packed artifact, and optionally prove packed == alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from packcli.choices import Consumer, Dtype, EngineName, RenderOracle
from packcli.cli.options import (
    OUTPUT,
    ArtifactDir,
    Json,
    RayAddress,
    VerifyEngine,
    VerifySharedFs,
    VerifySourceRoot,
    VerifyTemplate,
    VerifyTokenizer,
    VerifyWorkers,
)

ATTENTION = "Attention check (needs torch)"
CONSUMER = "Consumer check (needs the consumer's library)"
ORACLE = "Render oracle (needs transformers)"


def verify(
    directory: ArtifactDir,
    tokenizer: VerifyTokenizer = None,
    template: VerifyTemplate = None,
    source_root: VerifySourceRoot = None,
    reconstruct: Annotated[bool, typer.Option(help="Re-tokenize every source record and compare.")] = True,
    self_test: Annotated[bool, typer.Option(
        "--self-test", help="Corrupt copies of the artifact; show that each fault is caught.")] = False,
    attention: Annotated[Optional[str], typer.Option(
        help="Prove packed == alone through these backends (comma-separated): sdpa, flex, hf, naive, "
        "torch-varlen, flash-attn.", show_default=False, rich_help_panel=ATTENTION)] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N.", rich_help_panel=ATTENTION)] = "cpu",
    dtype: Annotated[Dtype, typer.Option(help="Precision of both sides.", rich_help_panel=ATTENTION)] = Dtype.float32,
    packs: Annotated[int, typer.Option(help="Packs (with a seam) the attention check runs on.",
                                       rich_help_panel=ATTENTION)] = 4,
    grads: Annotated[bool, typer.Option(help="Compare gradients too (--no-grads: forward only).",
                                        rich_help_panel=ATTENTION)] = True,
    consumer: Annotated[Optional[list[Consumer]], typer.Option(
        help="Run this trainer's own collation on the packs and check what the model receives (repeatable): "
        "trl (SFTTrainer's padding-free collator), hf (DataCollatorWithFlattening), packcli (PackDataset).",
        show_default=False, rich_help_panel=CONSUMER)] = None,
    consumer_packs: Annotated[Optional[int], typer.Option(
        help="Packs the consumer check runs on (default: every pack).", show_default=False,
        rich_help_panel=CONSUMER)] = None,
    render_oracle: Annotated[Optional[RenderOracle], typer.Option(
        help="Render every example again with this library (transformers: apply_chat_template with the pinned "
        "template and its assistant mask) and compare tokens and labels with the packs.", show_default=False,
        rich_help_panel=ORACLE)] = None,
    sample: Annotated[Optional[int], typer.Option(
        help="Records the render oracle checks, drawn with a fixed seed (default: every record).",
        show_default=False, rich_help_panel=ORACLE)] = None,
    max_violations: Annotated[int, typer.Option(help="Offending examples shown per check.",
                                                rich_help_panel=OUTPUT)] = 20,
    seam_out: Annotated[Optional[str], typer.Option(
        help="Write the seam table with a verify status per example (.parquet or .csv).", show_default=False,
        rich_help_panel=OUTPUT)] = None,
    json_out: Json = False,
    workers: VerifyWorkers = None,
    engine: VerifyEngine = EngineName.local,
    ray_address: RayAddress = None,
    shared_fs: VerifySharedFs = False,
) -> None:
    """Check every invariant of a packed artifact; exit 0 if all hold, 1 on a violation, 2 on bad input.

    Examples:

      packcli verify packed/

      packcli verify packed/ --attention sdpa,hf --json

      packcli verify packed/ --attention naive    # the control: must find a leak

      packcli verify packed/ --consumer trl --consumer packcli   # the collators

      packcli verify packed/ --render-oracle transformers --sample 500

      packcli verify fixtures/packed --self-test

      packcli verify packed/ --seam-out seams.csv --max-violations 100000

      packcli verify /mnt/out --engine ray --ray-address auto --shared-fs
    """
    from packcli.cli import console
    from packcli.cli.render import render_self_test, render_verify
    from packcli.verify import verify_artifact

    backends = [b.strip() for b in attention.split(",") if b.strip()] if attention is not None else None
    _check_options(directory, tokenizer=tokenizer, template=template, source_root=source_root, backends=backends,
                   device=device, dtype=dtype, packs=packs, grads=grads, max_violations=max_violations,
                   seam_out=seam_out, workers=workers, self_test=self_test, consumer_packs=consumer_packs,
                   render_oracle=render_oracle, sample=sample, engine=engine, ray_address=ray_address,
                   shared_fs=shared_fs)
    if self_test:
        from packcli.owned import scratch_folder
        from packcli.verify.faults import run_self_test

        with scratch_folder("packcli-selftest-", "verify --self-test's corrupted copies") as ws:
            results = run_self_test(directory, str(ws), source_root=source_root)
        raise typer.Exit(render_self_test(results, as_json=json_out))
    runner = None
    if engine is EngineName.ray:
        from packcli.engine import make_engine

        runner = make_engine(engine, workers=workers, address=ray_address, shared_fs=shared_fs,
                             shared="the sources and the tokenizer")
    report = verify_artifact(directory, tokenizer=tokenizer, template=template, source_root=source_root,
                             reconstruct=reconstruct, max_violations=max_violations,
                             progress=console.RichProgress(enabled=not json_out), workers=workers,
                             render_oracle=render_oracle.value if render_oracle else None, sample=sample,
                             engine=runner)
    attn = None
    if backends:
        from packcli.verify.run import attention_check

        attn = attention_check(directory, backends, device=device, dtype=dtype.value, packs=packs, check_grads=grads)
    consumers = []
    for name in consumer or []:
        from packcli.verify.consumer import check_consumer

        consumers.append(check_consumer(directory, name.value, max_packs=consumer_packs, max_violations=max_violations))
    if seam_out:
        from packcli.verify.report import write_seam_status

        write_seam_status(report, str(directory), seam_out)
    ok = render_verify(report, attn, as_json=json_out, consumers=consumers)
    raise typer.Exit(0 if ok else 1)


def _check_options(directory: Path, *, tokenizer: str | None, template: str | None, source_root: Path | None,
                   backends: list[str] | None, device: str, dtype: Dtype, packs: int, grads: bool,
                   max_violations: int, seam_out: str | None, workers: int | None, self_test: bool,
                   consumer_packs: int | None, render_oracle: RenderOracle | None, sample: int | None,
                   engine: EngineName, ray_address: str | None, shared_fs: bool) -> None:
    """Every option, before the artifact is read: a typo in --attention must not wait for reconstruction."""
    from packcli.checks import (
        directory_problems,
        int_problems,
        output_file_problems,
        raise_all,
        template_problems,
        tokenizer_problems,
    )
    from packcli.engine import worker_problems

    problems = directory_problems("DIRECTORY", directory) + directory_problems("--source-root", source_root)
    problems += tokenizer_problems("--tokenizer", tokenizer) + template_problems(template, tokenizer)
    problems += int_problems("--packs", packs, 1, 1_000_000) + int_problems("--max-violations", max_violations, 0)
    problems += worker_problems(workers, engine, ray_address=ray_address, shared_fs=shared_fs)
    problems += int_problems("--consumer-packs", consumer_packs, 1) + int_problems("--sample", sample, 1)
    if sample is not None and render_oracle is None:
        problems.append("--sample picks the records --render-oracle checks; pass --render-oracle too")
    problems += output_file_problems("--seam-out", seam_out, (".parquet", ".csv"))
    if self_test and (backends is not None or seam_out or render_oracle or engine is not EngineName.local):
        problems.append("--self-test runs its own checks, here; leave out --attention, --render-oracle, --seam-out "
                        "and --engine")
    if backends is not None and not backends:
        problems.append("--attention names no backend")
    raise_all(problems)
    if render_oracle:
        from packcli.verify.oracle import require_oracle

        require_oracle(render_oracle.value)
    if backends:
        from packcli.verify.attention import resolve_backends

        resolve_backends(backends, device=device, dtype=dtype.value, check_grads=grads)
