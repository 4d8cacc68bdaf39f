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
    scratch_dir: Annotated[Optional[Path], typer.Option(
        help="Folder for verify's temporary per-example columns, removed when it is done (a few hundred bytes an "
             "example; default: the system's temporary folder, $TMPDIR).", show_default=False,
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

      packcli verify /mnt/out --scratch-dir /mnt/scratch   # its temporary columns
    """
    from packcli.cli import console
    from packcli.cli.output import render_self_test, render_verify
    from packcli.verify.request import VerifyRequest, run_request

    request = VerifyRequest(
        directory, tokenizer=tokenizer, template=template, source_root=source_root, reconstruct=reconstruct,
        max_violations=max_violations, workers=workers, render_oracle=render_oracle.value if render_oracle else None,
        sample=sample, device=device, dtype=dtype.value, packs=packs, grads=grads,
        attention=tuple(b.strip() for b in attention.split(",") if b.strip()) if attention is not None else None,
        consumers=tuple(c.value for c in consumer or ()), consumer_packs=consumer_packs, seam_out=seam_out,
        self_test=self_test, engine=engine, ray_address=ray_address, shared_fs=shared_fs, scratch_dir=scratch_dir)
    outcome = run_request(request, console.RichProgress(enabled=not json_out))
    (render_self_test if outcome.self_test is not None else render_verify)(outcome, as_json=json_out)
    raise typer.Exit(0 if outcome.ok else 1)
