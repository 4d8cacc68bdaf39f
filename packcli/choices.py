"""Every closed set of choices a user makes, as str Enums: typer lists their values in ``--help``,
and the library compares against members instead of loose strings.

Imports nothing heavy: the CLI imports this module to build its options, and ``packcli --help``
must stay fast.
"""

from __future__ import annotations

from enum import Enum


class Format(str, Enum):
    """Input record formats; ``auto`` detects per record from its keys."""

    auto = "auto"
    messages = "messages"
    sharegpt = "sharegpt"
    prompt_completion = "prompt-completion"
    text = "text"


class Dedupe(str, Enum):
    """Duplicate records: keep every one (each is its own example), or drop exact duplicates after the first."""

    none = "none"
    exact = "exact"


class DroppableField(str, Enum):
    """A field a user may let the chat template drop (``--allow-dropped-fields``): such a record is packed
    as the template renders it, and counted (docs/chat-data.md); any other drop is a reject."""

    tool_calls = "tool_calls"


class LossPolicy(str, Enum):
    """Which tokens carry loss. ``auto``: assistant for chat, completion for prompt/completion, all for text."""

    auto = "auto"
    assistant = "assistant"
    last_assistant = "last-assistant"
    completion = "completion"
    all = "all"


class Strategy(str, Enum):
    """How examples are assigned to packs (the trade-offs: `packcli.pack.strategies`)."""

    window = "window"
    bfd = "bfd"
    ffd = "ffd"
    sequential = "sequential"


class Overlong(str, Enum):
    """What to do with an example longer than the capacity: leave it out, keep its first capacity tokens,
    or cut it into chunks of at most the capacity, each packed as its own segment (`packcli.job.chunks`)."""

    drop = "drop"
    truncate = "truncate"
    split = "split"


class AddToken(str, Enum):
    """Whether a text document gets a BOS (``--text-bos``) or an EOS (``--text-eos``): ``auto`` as the
    tokenizer's conventions say, ``yes``, ``no`` (the table: `packcli.tokenizer.ends`)."""

    auto = "auto"
    yes = "yes"
    no = "no"


class OnError(str, Enum):
    """What to do with a bad record: reject it (counted, written to rejects.jsonl) or stop."""

    skip = "skip"
    fail = "fail"


class BackendChoice(str, Enum):
    """Which library encodes: ``tokenizers`` (the reference), ``fastokens`` (exact where it is proven
    for the file, cross-checked as it runs), or ``auto`` (fastokens where it is exact, else tokenizers)."""

    auto = "auto"
    tokenizers = "tokenizers"
    fastokens = "fastokens"


class RenderBackend(str, Enum):
    """Which engine renders chat templates: ``jinja2`` (the reference, its sandbox), ``minijinja`` (where it
    is proven to render what jinja2 renders for the template, cross-checked as it runs), or ``auto``
    (minijinja where it is proven and measured faster, else jinja2)."""

    auto = "auto"
    jinja2 = "jinja2"
    minijinja = "minijinja"


class EngineName(str, Enum):
    """Where units run: this machine's processes, or a Ray cluster."""

    local = "local"
    ray = "ray"


class Dtype(str, Enum):
    """Precision of the attention check."""

    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


class Consumer(str, Enum):
    """A trainer whose own collation ``verify --consumer`` runs on the packs (docs/training.md)."""

    trl = "trl"
    hf = "hf"
    packcli = "packcli"


class RenderOracle(str, Enum):
    """An independent renderer ``verify --render-oracle`` compares every example with (docs/contract.md)."""

    transformers = "transformers"
