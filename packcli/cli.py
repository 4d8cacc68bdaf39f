"""The ``packcli`` command line: thin commands that parse, build a config, call the library, render.

Exit codes: 0 success; 1 a violation, a failed budget or a bad record under ``--on-error fail``;
2 a usage error or missing input. Set ``PACKCLI_DEBUG=1`` to see tracebacks of user errors.
"""

from __future__ import annotations

import atexit
import gc
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from packcli import console
from packcli.chat import LossPolicy
from packcli.config import OnError, Overlong
from packcli.errors import PackcliError
from packcli.ingest import Format

app = typer.Typer(
    name="packcli", no_args_is_help=True, add_completion=False, rich_markup_mode="rich",
    help="Pack JSONL chat data into leak-free training buffers, and prove it.",
)

Json = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
Tokenizer = Annotated[Optional[str], typer.Option(
    "--tokenizer", "-t", help="tokenizer.json(.gz) or a directory holding it (and tokenizer_config.json). "
    "Default: the bundled fixture tokenizer.")]
Template = Annotated[str, typer.Option(
    help="'auto' (the tokenizer's chat_template, else chatml), 'chatml', a .jinja file, or a tokenizer_config.json.")]
Loss = Annotated[LossPolicy, typer.Option("--loss", help="Which tokens carry loss; auto = assistant for chat, "
                                          "completion for prompt/completion, all for text.")]
InputFormat = Annotated[Format, typer.Option("--format", help="Force the record format instead of detecting it.")]


def _fail(exc: PackcliError) -> None:
    if os.environ.get("PACKCLI_DEBUG"):
        raise exc
    console.err.print(f"[bold red]error:[/] {exc.message}", highlight=False, markup=True, soft_wrap=True)
    if exc.hint:
        console.err.print(f"  hint: {exc.hint}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _default_inputs(inputs: list[str] | None, tokenizer: str | None) -> tuple[tuple[str, ...], str]:
    from packcli.bundled import DEFAULT_INPUTS, DEFAULT_TOKENIZER, bundled

    def shown(path: str) -> str:  # relative paths keep manifests identical across checkouts
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path

    paths = tuple(inputs) if inputs else tuple(shown(bundled(p)) for p in DEFAULT_INPUTS)
    return paths, tokenizer or shown(bundled(DEFAULT_TOKENIZER))


@app.command()
def pack(
    inputs: Annotated[Optional[list[str]], typer.Argument(
        help="JSONL files or globs (.jsonl, .jsonl.gz, .jsonl.zst). Default: the bundled fixture corpus.",
        show_default=False)] = None,
    tokenizer: Tokenizer = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (written atomically).")] = Path("packed"),
    capacity: Annotated[int, typer.Option("--capacity", "-c", help="Tokens per pack.")] = 4096,
    template: Template = "auto",
    loss: Loss = LossPolicy.auto,
    input_format: InputFormat = Format.auto,
    strategy: Annotated[str, typer.Option(help="window | bfd | ffd | sequential (see `packcli stats`).")] = "window",
    window: Annotated[Optional[int], typer.Option(help="Examples per window for --strategy window.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the example and pack shuffles.")] = 0,
    shuffle: Annotated[bool, typer.Option(help="Shuffle examples before packing.")] = True,
    shuffle_packs: Annotated[bool, typer.Option(help="Shuffle packs after packing.")] = True,
    overlong: Annotated[Overlong, typer.Option(help="Examples longer than --capacity.")] = Overlong.drop,
    on_error: Annotated[OnError, typer.Option(help="skip: reject bad records to rejects.jsonl; fail: stop.")] = OnError.skip,
    min_density: Annotated[Optional[float], typer.Option(help="Fail (write nothing) below this density.")] = None,
    max_displacement: Annotated[Optional[float], typer.Option(
        help="Fail (write nothing) if mean displacement exceeds this many examples.")] = None,
    packs_per_shard: Annotated[int, typer.Option(help="Packs (rows) per Parquet shard.")] = 2048,
    force: Annotated[bool, typer.Option(help="Replace a non-empty --out.")] = False,
    engine: Annotated[str, typer.Option(help="local, or ray to tokenize units on a Ray cluster (packcli[ray]).")] = "local",
    workers: Annotated[Optional[int], typer.Option(
        help="Processes that tokenize units: local processes (default: one per CPU, at most one per GiB of "
        "available memory; 1 runs everything in this process), or Ray workers with --engine ray (default: "
        "the cluster's CPUs). The output is the same bytes.")] = None,
    ray_address: Annotated[Optional[str], typer.Option(help="Join this Ray cluster ('auto' for the current one).")] = None,
    shared_fs: Annotated[bool, typer.Option(help="Confirm --out is on a filesystem every Ray node mounts.")] = False,
    unit_lines: Annotated[int, typer.Option(help="Input lines per unit of work (the grain of parallel work and resume).")] = 10_000,
    tokenizer_backend: Annotated[str, typer.Option(
        help="auto (fastokens where it is exact for the tokenizer file, else tokenizers), hf (tokenizers), "
        "or fast (fastokens, an error if unsupported). The output is the same bytes with every backend.")] = "auto",
    paranoid_tokenizer: Annotated[bool, typer.Option(
        help="Cross-check every example against tokenizers, not a sample (slower; for a new tokenizer file).")] = False,
    json_out: Json = False,
) -> None:
    """Tokenize, mask and pack JSONL chat data into Parquet shards with a hashed manifest.

    Examples:

      packcli pack                                   # bundled corpus and tokenizer -> ./packed

      packcli pack data/*.jsonl -t tok/ -c 8192 -o out/

      packcli pack chat.jsonl.gz -t tokenizer.json --template qwen3_training.jinja --loss last-assistant

      packcli pack data.jsonl -t tok/ --strategy bfd --min-density 0.98 --json

      packcli pack data.jsonl -t tok/ --tokenizer-backend hf        # the reference tokenizer only

      packcli pack big.jsonl -t tok/ --workers 1     # one process (default: one per CPU)

      packcli pack big/*.jsonl -t tok/ --engine ray --ray-address auto --shared-fs -o /mnt/shared/out
    """
    from packcli.config import PackConfig
    from packcli.engine import make_engine
    from packcli.pipeline import pack_corpus
    from packcli.render import render_pack_summary

    try:
        paths, tok = _default_inputs(inputs, tokenizer)
        config = PackConfig(
            inputs=paths, tokenizer=tok, out=out, capacity=capacity, template=template, loss=loss,
            input_format=input_format, strategy=strategy, window=window, seed=seed, shuffle=shuffle,
            shuffle_packs=shuffle_packs, overlong=overlong, on_error=on_error, min_density=min_density,
            max_displacement=max_displacement, packs_per_shard=packs_per_shard, force=force, lines_per_unit=unit_lines,
            tokenizer_backend=tokenizer_backend, paranoid_tokenizer=paranoid_tokenizer,
        )
        runner = make_engine(engine, workers=workers, address=ray_address, out=str(out), shared_fs=shared_fs)
        summary = pack_corpus(config, progress=console.Progress(enabled=not json_out), engine=runner)
    except PackcliError as exc:
        _fail(exc)
    render_pack_summary(summary, as_json=json_out)


@app.command()
def verify(
    directory: Annotated[Path, typer.Argument(help="The artifact directory (pack's --out).")],
    tokenizer: Annotated[Optional[str], typer.Option(
        "--tokenizer", "-t", help="Tokenizer to check against (default: where the manifest says).")] = None,
    template: Annotated[Optional[str], typer.Option(help="Template to check against (default: where the manifest says).")] = None,
    source_root: Annotated[Optional[Path], typer.Option(help="Resolve relative source paths from here.")] = None,
    reconstruct: Annotated[bool, typer.Option(help="Re-tokenize every source record and compare.")] = True,
    attention: Annotated[Optional[str], typer.Option(
        help="Also prove packed == alone through these backends: sdpa, flex, hf, naive, torch-varlen, flash-attn "
        "(comma-separated; needs the torch extra).")] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda, for --attention.")] = "cpu",
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16, for --attention.")] = "float32",
    packs: Annotated[int, typer.Option(help="How many packs the attention check runs on.")] = 4,
    grads: Annotated[bool, typer.Option(help="Compare gradients too (--no-grads: forward only, e.g. flex on CPU).")] = True,
    self_test: Annotated[bool, typer.Option(
        "--self-test", help="Corrupt copies of the artifact in a temp dir and show that each fault is caught.")] = False,
    max_violations: Annotated[int, typer.Option(help="Offending examples shown per check.")] = 20,
    workers: Annotated[Optional[int], typer.Option(
        help="Processes that re-tokenize the sources (default: one per CPU from 16,384 records up).")] = None,
    seam_out: Annotated[Optional[str], typer.Option(
        help="Write the seam table with a per-example verify status (.parquet or .csv).")] = None,
    json_out: Json = False,
) -> None:
    """Check every invariant of a packed artifact; exit 0 if all hold, 1 on a violation, 2 on bad input.

    Examples:

      packcli verify packed/

      packcli verify packed/ --attention sdpa,hf --json

      packcli verify packed/ --attention flex --no-grads     # flex has no CPU backward in torch 2.13

      packcli verify packed/ --attention naive               # negative control: must report a leak (exit 1)

      packcli verify fixtures/packed --self-test

      packcli verify packed/ --seam-out seams.csv --max-violations 100000
    """
    from packcli.render import render_self_test, render_verify
    from packcli.verify import verify_artifact

    try:
        if self_test:
            import tempfile

            from packcli.verify.faults import run_self_test

            with tempfile.TemporaryDirectory(prefix="packcli-selftest-") as ws:
                results = run_self_test(directory, ws, source_root=source_root)
            raise typer.Exit(render_self_test(results, as_json=json_out))
        report = verify_artifact(directory, tokenizer=tokenizer, template=template, source_root=source_root,
                                 reconstruct=reconstruct, max_violations=max_violations,
                                 progress=console.Progress(enabled=not json_out), workers=workers)
        attn = None
        if attention:
            from packcli.verify.artifact import attention_check

            attn = attention_check(directory, [b.strip() for b in attention.split(",") if b.strip()],
                                   device=device, dtype=dtype, packs=packs, check_grads=grads)
        if seam_out:
            from packcli.verify.report import write_seam_status

            write_seam_status(report, str(directory), seam_out)
    except PackcliError as exc:
        _fail(exc)
    ok = render_verify(report, attn, as_json=json_out)
    raise typer.Exit(0 if ok else 1)


@app.command()
def stats(
    inputs: Annotated[list[str], typer.Argument(help="JSONL files/globs, or one packed artifact directory.")],
    tokenizer: Tokenizer = None,
    template: Template = "auto",
    loss: Loss = LossPolicy.auto,
    capacity: Annotated[Optional[list[int]], typer.Option(
        "--capacity", "-c", help="Capacities to try (repeatable). Default: 1k..32k.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the what-if shuffles.")] = 0,
    min_density: Annotated[float, typer.Option(help="Density budget for the recommendation.")] = 0.95,
    max_displacement: Annotated[Optional[float], typer.Option(
        help="Mean displacement budget (examples) for the recommendation. Default: 1% of examples, at least 1000.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG: lengths, pack fill, capacity sweep.")] = None,
    json_out: Json = False,
) -> None:
    """Length quantiles and a what-if sweep over capacities and strategies, or an artifact's density.

    Examples:

      packcli stats data/*.jsonl -t tok/                 # quantiles, sweep, recommendation

      packcli stats data.jsonl -t tok/ -c 2048 -c 4096 --plot lengths.png

      packcli stats packed/ --json                       # an artifact: density, remainder, identity
    """
    from packcli.render import render_artifact_stats, render_length_stats
    from packcli.stats import DEFAULT_CAPACITIES, artifact_stats, length_stats

    try:
        if len(inputs) == 1 and Path(inputs[0]).is_dir():
            result = artifact_stats(inputs[0])
            render_artifact_stats(result, as_json=json_out, plot=plot)
            return
        paths, tok = _default_inputs(inputs, tokenizer)
        result = length_stats(paths, tok, template=template, loss=loss, capacities=tuple(capacity or DEFAULT_CAPACITIES),
                              seed=seed, min_density=min_density, max_displacement=max_displacement)
    except PackcliError as exc:
        _fail(exc)
    render_length_stats(result, as_json=json_out, plot=plot)


def main() -> None:
    # The interpreter's last garbage collection at exit walks everything still alive (a loaded tokenizer,
    # numba's dispatchers): 0.5-0.7 s after a Qwen3 `pack`. Frozen objects are skipped by it and freed
    # by the OS instead; nothing is lost, as every file packcli writes is closed before the command returns.
    atexit.register(gc.freeze)
    app()
