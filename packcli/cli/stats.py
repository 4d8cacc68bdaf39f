"""``packcli stats``: length quantiles and a what-if sweep before packing, or an artifact's density after."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from packcli.choices import AddToken, BackendChoice, Format, LossPolicy
from packcli.cli.options import (
    OUTPUT,
    CompletionField,
    ContentField,
    InputFormat,
    Json,
    Loss,
    MessagesField,
    PromptField,
    RoleField,
    StatsCapacities,
    StatsMaxDisplacement,
    StatsMinDensity,
    StatsSeed,
    StatsSplitMinLast,
    StatsSplitOverlap,
    StatsTokenizerBackend,
    StatsWorkers,
    Template,
    TextBos,
    TextEos,
    TextField,
    Tokenizer,
)


def stats(
    inputs: Annotated[list[str], typer.Argument(
        help="Inputs as pack takes them (JSONL, JSON arrays, Parquet, datasets directories, hf:NAME), or one "
             "packed artifact.")],
    tokenizer: Tokenizer = None,
    input_format: InputFormat = Format.auto,
    messages_field: MessagesField = "messages",
    role_field: RoleField = "role",
    content_field: ContentField = "content",
    prompt_field: PromptField = "prompt",
    completion_field: CompletionField = "completion",
    text_field: TextField = "text",
    text_bos: TextBos = AddToken.auto,
    text_eos: TextEos = AddToken.auto,
    template: Template = "auto",
    loss: Loss = LossPolicy.auto,
    capacity: StatsCapacities = None,
    seed: StatsSeed = 0,
    split_overlap: StatsSplitOverlap = 0,
    split_min_last: StatsSplitMinLast = 1,
    min_density: StatsMinDensity = 0.95,
    max_displacement: StatsMaxDisplacement = None,
    tokenizer_backend: StatsTokenizerBackend = BackendChoice.auto,
    workers: StatsWorkers = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a plot (.png, .pdf or .svg): lengths, pack fill, "
                                                 "capacity sweep.", show_default=False, rich_help_panel=OUTPUT)] = None,
    json_out: Json = False,
) -> None:
    """Length quantiles and a what-if sweep over capacities and strategies, or an artifact's density.

    Examples:

      packcli stats data/*.jsonl -t Qwen/Qwen3-8B   # quantiles, what-if, advice

      packcli stats data.jsonl -t tok/ -c 2048 -c 4096 --plot lengths.png

      packcli stats books.jsonl -t tok/ -c 8192   # drop/truncate/split

      packcli stats packed/ --json --plot packs.png   # an artifact's packs
    """
    from packcli.checks import output_file_problems, raise_all
    from packcli.cli.output import render_artifact_stats, render_length_stats
    from packcli.cli.pack import default_inputs
    from packcli.ingest import FieldMap, is_dataset_dir
    from packcli.plots import PLOT_SUFFIXES
    from packcli.stats import DEFAULT_CAPACITIES, artifact_stats, length_stats, length_stats_problems

    problems = output_file_problems("--plot", plot, PLOT_SUFFIXES)
    if len(inputs) == 1 and Path(inputs[0]).is_dir() and not is_dataset_dir(Path(inputs[0])):
        given = [flag for flag, value in (("--tokenizer", tokenizer), ("--capacity", capacity),
                                          ("--max-displacement", max_displacement), ("--workers", workers))
                 if value is not None]
        given += [flag for flag, value, default in (("--template", template, "auto"), ("--loss", loss, LossPolicy.auto),
                                                    ("--seed", seed, 0), ("--min-density", min_density, 0.95),
                                                    ("--split-overlap", split_overlap, 0),
                                                    ("--text-bos", text_bos, AddToken.auto),
                                                    ("--text-eos", text_eos, AddToken.auto),
                                                    ("--split-min-last", split_min_last, 1),
                                                    ("--tokenizer-backend", tokenizer_backend, BackendChoice.auto))
                  if value != default]
        if given:
            problems.append(f"{', '.join(given)}: for raw inputs; {inputs[0]} is a packed artifact, whose "
                            "settings are its manifest's")
        raise_all(problems)
        render_artifact_stats(artifact_stats(inputs[0]), as_json=json_out, plot=plot)
        return
    paths, tok = default_inputs(inputs, tokenizer)
    fields = FieldMap(messages=messages_field, role=role_field, content=content_field, prompt=prompt_field,
                      completion=completion_field, text=text_field)
    capacities = tuple(capacity or DEFAULT_CAPACITIES)
    settings = {"template": template, "capacities": capacities, "seed": seed, "min_density": min_density,
                "max_displacement": max_displacement, "fields": fields, "workers": workers,
                "split_overlap": split_overlap, "split_min_last": split_min_last}
    raise_all(problems + length_stats_problems(paths, tok, **settings))
    result = length_stats(paths, tok, loss=loss, input_format=input_format, backend=tokenizer_backend,
                          text_bos=text_bos, text_eos=text_eos, **settings)
    render_length_stats(result, as_json=json_out, plot=plot)
