"""Options used by more than one command, declared once as ``Annotated`` aliases.

Help panels group a command's options by what they are about, so ``--help`` reads at 80 columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from packcli.choices import AddToken, BackendChoice, EngineName, Format, LossPolicy

INPUTS = "Inputs"
TEMPLATE = "Template and loss"
PACKING = "Packing"
OUTPUT = "Output"
PERFORMANCE = "Performance"

Json = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.", rich_help_panel=OUTPUT)]
Tokenizer = Annotated[Optional[str], typer.Option(
    "--tokenizer", "-t", help="tokenizer.json(.gz), its directory (with tokenizer_config.json), or a Hub name "
    "(ORG/NAME, hf:ORG/NAME@REVISION) in the local Hugging Face cache, read offline.",
    show_default=False, rich_help_panel=INPUTS)]
Template = Annotated[str, typer.Option(
    help="auto (the tokenizer's own: chat_template.jinja or tokenizer_config.json; ChatML only for a tokenizer "
    "with none and ChatML's tokens), chatml, trl:NAME (one of TRL's *_training.jinja), a .jinja file, a "
    "tokenizer_config.json, or the name of one of the tokenizer's templates (tool_use). Assistant-only loss with a "
    "template without {% generation %} markers uses the training template TRL maps it to.",
    rich_help_panel=TEMPLATE)]
TemplateDate = Annotated[str, typer.Option(
    help="The date strftime_now gives templates that print one (YYYY-MM-DD); pinned so packs are reproducible.",
    rich_help_panel=TEMPLATE)]
Loss = Annotated[LossPolicy, typer.Option(
    "--loss", help="Tokens that carry loss; auto: assistant (chat), completion, all (text).", rich_help_panel=TEMPLATE)]
InputFormat = Annotated[Format, typer.Option(
    "--format", help="Force the record format instead of detecting it per record.", rich_help_panel=INPUTS)]

# Column mapping (`packcli.ingest.FieldMap`): the same for pack and stats, and for every source kind.
MessagesField = Annotated[str, typer.Option(
    "--messages-field", help="Field holding the list of turns (OpenAI messages).", rich_help_panel=INPUTS)]
RoleField = Annotated[str, typer.Option(
    "--role-field", help="Key of each turn's role (in --messages-field).", rich_help_panel=INPUTS)]
ContentField = Annotated[str, typer.Option(
    "--content-field", help="Key of each turn's content (in --messages-field).", rich_help_panel=INPUTS)]
PromptField = Annotated[str, typer.Option("--prompt-field", help="Field holding the prompt.", rich_help_panel=INPUTS)]
CompletionField = Annotated[str, typer.Option(
    "--completion-field", help="Field holding the completion.", rich_help_panel=INPUTS)]
TextField = Annotated[str, typer.Option("--text-field", help="Field holding plain text.", rich_help_panel=INPUTS)]

# A text record's BOS and EOS (`packcli.tokenizer.ends`): the same for pack and stats.
TextBos = Annotated[AddToken, typer.Option(
    "--text-bos", help="A BOS before each text document: auto (what the tokenizer's post-processor adds), yes, no.",
    rich_help_panel=TEMPLATE)]
TextEos = Annotated[AddToken, typer.Option(
    "--text-eos", help="An EOS after each text document: auto (the post-processor's, else eos_token), yes, no.",
    rich_help_panel=TEMPLATE)]

# The artifact `verify` and `show` read.
ArtifactDir = Annotated[Path, typer.Argument(help="The artifact directory (pack's --out).")]

# Options more than one command takes, each saying what it does there: one declaration (type, flag,
# panel) per option, the help per command.


def _declared(kind: Any, *names: str, panel: str, **settings: Any) -> Callable[[str], Any]:
    """An option's declaration (its type, flag, panel and settings), to be given each command's help."""

    def with_help(help: str) -> Any:
        return Annotated[kind, typer.Option(*names, help=help, rich_help_panel=panel, **settings)]

    return with_help


_tokenizer = _declared(Optional[str], "--tokenizer", "-t", panel=INPUTS, show_default=False)
_source_root = _declared(Optional[Path], panel=INPUTS, show_default=False)
_seed = _split_overlap = _split_min_last = _declared(int, panel=PACKING)
_max_displacement = _declared(Optional[float], panel=PACKING, show_default=False)
_tokenizer_backend = _declared(BackendChoice, panel=PERFORMANCE)
_workers = _declared(Optional[int], panel=PERFORMANCE, show_default=False)
_engine = _declared(EngineName, panel=PERFORMANCE)
_shared_fs = _declared(bool, panel=PERFORMANCE)

VerifyTokenizer = _tokenizer("Tokenizer to check against (default: as pinned).")
ShowTokenizer = _tokenizer("Tokenizer (default: as pinned).")
VerifyTemplate = Annotated[Optional[str], typer.Option(help="Template to check against (default: as pinned).",
                                                       show_default=False, rich_help_panel=INPUTS)]
VerifySourceRoot = _source_root("Where the sources, tokenizer and template are: their paths as given to pack, "
                                "relative to here, or found under here by name (and checked by sha256).")
ShowSourceRoot = _source_root("Resolve the pinned tokenizer's path from here.")

PackCapacity = Annotated[int, typer.Option("--capacity", "-c", help="Tokens per pack.", rich_help_panel=PACKING)]
StatsCapacities = Annotated[Optional[list[int]], typer.Option(
    "--capacity", "-c", help="Capacities to try (repeatable). Default: 1k..32k.", show_default=False,
    rich_help_panel=PACKING)]
PackSeed = _seed("Seed of the example and pack shuffles.")
StatsSeed = _seed("Seed of the what-if shuffles.")
PackSplitOverlap = _split_overlap("--overlong split: tokens each chunk repeats from the one before, as context "
                                  "without loss (at most half the capacity).")
StatsSplitOverlap = _split_overlap("As pack's, for what --overlong split would keep.")
PackSplitMinLast = _split_min_last("--overlong split: drop (and count) a last chunk that adds fewer tokens than "
                                   "this.")
StatsSplitMinLast = _split_min_last("As pack's, for what --overlong split would keep.")
PackMinDensity = Annotated[Optional[float], typer.Option(help="Fail (write nothing) below this density.",
                                                         show_default=False, rich_help_panel=PACKING)]
StatsMinDensity = Annotated[float, typer.Option(help="Density budget for the recommendation.",
                                                rich_help_panel=PACKING)]
PackMaxDisplacement = _max_displacement("Fail (write nothing) above this mean displacement (examples).")
StatsMaxDisplacement = _max_displacement("Mean displacement budget (examples). Default: 1% of examples, at least "
                                         "1000.")
PackTokenizerBackend = _tokenizer_backend("auto: fastokens where proven exact, else tokenizers. Same bytes either "
                                          "way.")
StatsTokenizerBackend = _tokenizer_backend("As pack's: auto: fastokens where proven exact, else tokenizers. Same "
                                           "lengths either way.")

PackWorkers = _workers("Processes (default: one per CPU and per GiB free, fewer for small inputs: one per 16 MiB), "
                       "or Ray workers. Same bytes either way.")
StatsWorkers = _workers("Processes that tokenize (default: as pack's: one per CPU and per GiB free, one per 16 MiB "
                        "of input). Same numbers either way.")
VerifyWorkers = _workers("Processes that re-tokenize (default: one per CPU, fewer for small sources: one per 16 "
                         "MiB), or Ray workers.")
PackEngine = _engine(f"local, or ray to run on a Ray cluster ({escape('packcli[ray]')}).")
VerifyEngine = _engine(f"local, or ray to re-tokenize and judge the bookkeeping on a Ray cluster "
                       f"({escape('packcli[ray]')}). Same report either way.")
RayAddress = Annotated[Optional[str], typer.Option(help="Ray cluster to join ('auto': the current one).",
                                                   show_default=False, rich_help_panel=PERFORMANCE)]
PackSharedFs = _shared_fs("Confirm --out is on a filesystem every Ray node mounts.")
VerifySharedFs = _shared_fs("Confirm the artifact, the sources and the tokenizer are on a filesystem every Ray node "
                            "mounts at the same path.")

# Library messages name a parameter as Python spells it, in backticks: `capacity`, `overlong='truncate'`,
# `fields.messages`, `reconstruct=False` (a Python caller of `packcli.pack_corpus` passes no flags). The CLI
# prints the flag instead (`as_flags`), so a command-line user reads the option they typed. One entry per
# spelling: a parameter two library functions name differently (`capacities`, `backend`) has two.
FLAGS = {
    "capacity": "--capacity", "capacities": "--capacity", "window": "--window", "strategy": "--strategy",
    "seed": "--seed", "overlong": "--overlong", "split_overlap": "--split-overlap",
    "split_min_last": "--split-min-last", "min_density": "--min-density", "max_displacement": "--max-displacement",
    "max_reject_fraction": "--max-reject-fraction", "packs_per_shard": "--packs-per-shard",
    "lines_per_unit": "--unit-lines", "template": "--template", "template_date": "--template-date",
    "loss": "--loss", "input_format": "--format", "on_error": "--on-error", "dedupe": "--dedupe", "mix": "--mix",
    "allow_dropped_fields": "--allow-dropped-fields", "text_bos": "--text-bos", "text_eos": "--text-eos",
    "tokenizer": "--tokenizer", "tokenizer_backend": "--tokenizer-backend", "backend": "--tokenizer-backend",
    "render_backend": "--render-backend", "out": "--out", "force": "--force", "workers": "--workers",
    "engine": "--engine", "ray_address": "--ray-address", "shared_fs": "--shared-fs",
    "source_root": "--source-root", "reconstruct=False": "--no-reconstruct", "example_id": "--example",
    "source": "--source", "pack": "--pack", "render_oracle": "--render-oracle", "sample": "--sample",
    "consumer": "--consumer", "device": "--device", "dtype": "--dtype", "seam_out": "--seam-out",
    "directory": "DIRECTORY", "packs": "--packs", "max_violations": "--max-violations",
    "consumer_packs": "--consumer-packs", "attention": "--attention", "self_test": "--self-test",
    "scratch_dir": "--scratch-dir",
    **{f"fields.{part}": f"--{part}-field" for part in ("messages", "role", "content", "prompt", "completion", "text")},
}
_NAMED = re.compile(r"`([^`\n]+)`")


def as_flags(text: str | None) -> str | None:
    """``text`` with every parameter a library message names (`FLAGS`) spelled as its CLI flag:
    ```capacity``` -> ``--capacity``, ```overlong='truncate'``` -> ``--overlong truncate``. Anything else in
    backticks (`packcli.owned`, a command) is left as it is."""
    if text is None:
        return None

    def flag(match: re.Match[str]) -> str:
        named = match[1]
        if named in FLAGS:
            return FLAGS[named]
        name, is_set, value = named.partition("=")
        if is_set and name in FLAGS:
            return f"{FLAGS[name]} {value.strip(chr(39))}"
        return match[0]

    return _NAMED.sub(flag, text)
