"""``packcli stats``: length quantiles and a what-if sweep before packing, or an artifact's density after."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from packcli.choices import LossPolicy
from packcli.cli.options import OUTPUT, PACKING, Json, Loss, Template, Tokenizer


def stats(
    inputs: Annotated[list[str], typer.Argument(help="JSONL files/globs, or one packed artifact directory.")],
    tokenizer: Tokenizer = None,
    template: Template = "auto",
    loss: Loss = LossPolicy.auto,
    capacity: Annotated[Optional[list[int]], typer.Option(
        "--capacity", "-c", help="Capacities to try (repeatable). Default: 1k..32k.", show_default=False,
        rich_help_panel=PACKING)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the what-if shuffles.", rich_help_panel=PACKING)] = 0,
    min_density: Annotated[float, typer.Option(help="Density budget for the recommendation.",
                                               rich_help_panel=PACKING)] = 0.95,
    max_displacement: Annotated[Optional[float], typer.Option(
        help="Mean displacement budget (examples). Default: 1% of examples, at least 1000.", show_default=False,
        rich_help_panel=PACKING)] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG: lengths, pack fill, capacity sweep.",
                                                 show_default=False, rich_help_panel=OUTPUT)] = None,
    json_out: Json = False,
) -> None:
    """Length quantiles and a what-if sweep over capacities and strategies, or an artifact's density.

    Examples:

      packcli stats data/*.jsonl -t tok/                 # quantiles, sweep, recommendation

      packcli stats data.jsonl -t tok/ -c 2048 -c 4096 --plot lengths.png

      packcli stats packed/ --json                       # an artifact: density, remainder, identity
    """
    from packcli.cli.app import fail
    from packcli.cli.pack import default_inputs
    from packcli.cli.render import render_artifact_stats, render_length_stats
    from packcli.errors import PackcliError
    from packcli.stats import DEFAULT_CAPACITIES, artifact_stats, length_stats

    try:
        if len(inputs) == 1 and Path(inputs[0]).is_dir():
            result = artifact_stats(inputs[0])
            render_artifact_stats(result, as_json=json_out, plot=plot)
            return
        paths, tok = default_inputs(inputs, tokenizer)
        result = length_stats(paths, tok, template=template, loss=loss, capacities=tuple(capacity or DEFAULT_CAPACITIES),
                              seed=seed, min_density=min_density, max_displacement=max_displacement)
    except PackcliError as exc:
        fail(exc)
    render_length_stats(result, as_json=json_out, plot=plot)
