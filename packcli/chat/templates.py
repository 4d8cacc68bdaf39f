"""Chat templates: where a template comes from, and whether it can say what the assistant wrote.

Supervised spans come from ``{% generation %}...{% endgeneration %}`` markers (the convention of
HF's ``apply_chat_template(return_assistant_tokens_mask=True)`` and TRL's ``*_training.jinja``): the
template itself says which characters the assistant wrote, so no role-guessing heuristic can drift
from what the model sees. Where HF returns an all-zero mask for a template without markers, we raise.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from packcli.choices import LossPolicy
from packcli.errors import InputError

GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")


@dataclass(frozen=True)
class ChatTemplate:
    """A template's text and where it came from; its sha256 pins it in the manifest."""

    text: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def origin(self) -> str:
        """Where it came from, in a location-free word (the manifest hashes it): ``builtin:chatml``,
        ``tokenizer_config.json`` (the tokenizer's own), or ``file:NAME``."""
        if self.source in ("builtin:chatml", "tokenizer_config.json"):
            return self.source
        return f"file:{Path(self.source).name}"

    @property
    def has_generation_markers(self) -> bool:
        return bool(GENERATION_MARKER.search(self.text))


def load_template(spec: str, tokenizer_config: dict | None = None) -> ChatTemplate:
    """Resolve ``--template``: ``auto``, ``chatml``, a ``.jinja`` file, or a ``tokenizer_config.json``.

    ``auto`` takes the tokenizer's own ``chat_template`` when it has one, else the built-in ChatML.

    Raises:
        InputError: the file is missing, unreadable, or has no chat template.
    """
    if spec == "auto":
        if tokenizer_config and isinstance(tokenizer_config.get("chat_template"), str):
            return ChatTemplate(tokenizer_config["chat_template"], "tokenizer_config.json")
        spec = "chatml"
    if spec == "chatml":
        text = resources.files("packcli").joinpath("templates/chatml.jinja").read_text(encoding="utf-8")
        return ChatTemplate(text, "builtin:chatml")
    path = Path(spec)
    if not path.is_file():
        raise InputError(f"template {spec}: no such file", "use --template chatml, a .jinja file or a tokenizer_config.json")
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            config = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from exc
        template = config.get("chat_template") if isinstance(config, dict) else None
        if isinstance(template, list):  # newer configs hold named templates
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if not isinstance(template, str):
            raise InputError(f"{path}: has no chat_template", "pass a .jinja file with --template")
        return ChatTemplate(template, str(path))
    return ChatTemplate(raw, str(path))


def require_markers(template: ChatTemplate, policy: LossPolicy) -> None:
    """Refuse an assistant-only policy with a template that cannot say what the assistant wrote.

    Called before any data is read when the policy is explicit; under ``auto`` the first chat record
    triggers the same error.

    Raises:
        InputError: the template has no ``{% generation %}`` markers.
    """
    if policy in (LossPolicy.assistant, LossPolicy.last_assistant) and not template.has_generation_markers:
        raise _no_markers(template)


def _no_markers(template: ChatTemplate) -> InputError:
    return InputError(
        f"template {template.source} has no {{% generation %}} markers, so assistant-only loss masks cannot be computed",
        "use --template chatml, a *_training.jinja template (e.g. TRL's), or --loss all",
    )
