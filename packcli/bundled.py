"""Where the bundled demo data lives: the repository's ``fixtures/`` (an editable install, as the
README sets up). A bare ``packcli pack`` packs this corpus with this tokenizer."""

from __future__ import annotations

from pathlib import Path

from packcli.errors import InputError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DEFAULT_INPUTS = ("corpus/openai.jsonl", "corpus/sharegpt.jsonl", "corpus/prompt_completion.jsonl",
                  "corpus/text.jsonl", "corpus/openai.jsonl.gz")
DEFAULT_TOKENIZER = "tokenizer"


def bundled(relative: str) -> str:
    """Path of a bundled fixture, or a clear error when this installation has none."""
    path = FIXTURES / relative
    if not path.exists():
        raise InputError(f"no bundled data at {path} (packcli was not installed from a source checkout)",
                         "pass INPUT files and `tokenizer` explicitly")
    return str(path)
