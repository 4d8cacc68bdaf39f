"""Options used by more than one command, declared once as ``Annotated`` aliases.

Help panels group a command's options by what they are about, so ``--help`` reads at 80 columns.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from packcli.choices import AddToken, Format, LossPolicy

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
