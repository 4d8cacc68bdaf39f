"""Chat templates: where a template comes from, and whether it can say what the assistant wrote.

Supervised spans come from ``{% generation %}...{% endgeneration %}`` markers (the convention of
HF's ``apply_chat_template(return_assistant_tokens_mask=True)`` and TRL's ``*_training.jinja``): the
template itself says which characters the assistant wrote, so no role-guessing heuristic can drift
from what the model sees. Where HF returns an all-zero mask for a template without markers, we raise.

The template is the tokenizer's own, found where transformers finds it
(`packcli.tokenizer.load.find_chat_templates`), unless ``--template`` names another. Nothing falls
back silently: packcli's built-in ChatML is used under ``auto`` only for a tokenizer with no template
of its own whose vocabulary has ChatML's tokens, and the template's ``note`` then says so in words
(the summary and the manifest print it).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from packcli.chat.training import TRL_PREFIX, TrlTemplate, training_hint, trl_template, trl_training_template
from packcli.choices import LossPolicy
from packcli.errors import InputError
from packcli.tokenizer.load import TOKENIZER_SOURCE

if TYPE_CHECKING:
    from packcli.tokenizer import LoadedTokenizer

GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")
BUILTIN_CHATML = "builtin:chatml"
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
BUILTIN_NOTE = "packcli's built-in ChatML: the tokenizer has no chat template of its own"
ASSISTANT_POLICIES = (LossPolicy.assistant, LossPolicy.last_assistant)


@dataclass(frozen=True)
class ChatTemplate:
    """A template's text, where it came from (and its name there); its sha256 pins it in the manifest.

    ``note`` is what a user must be told about the choice in words (empty when nothing needs saying).
    """

    text: str
    source: str
    name: str | None = None
    note: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def origin(self) -> str:
        """Where it came from, in location-free words (the manifest hashes them): ``builtin:chatml``,
        ``tokenizer:FILE`` (one of the tokenizer's own, relative to its directory), ``trl:NAME`` (one of
        TRL's training templates), or ``file:NAME``."""
        if self.source == BUILTIN_CHATML or self.source.startswith((TOKENIZER_SOURCE, TRL_PREFIX)):
            return self.source
        return f"file:{Path(self.source).name}"

    @property
    def has_generation_markers(self) -> bool:
        return bool(GENERATION_MARKER.search(self.text))

    def describe(self) -> str:
        """One line for the summary: the source, the name, and the note."""
        named = f"{self.source} ({self.name})" if self.name and self.name != "default" else self.source
        return f"{named}: {self.note}" if self.note else named


def builtin_chatml() -> ChatTemplate:
    text = resources.files("packcli").joinpath("templates/chatml.jinja").read_text(encoding="utf-8")
    return ChatTemplate(text, BUILTIN_CHATML, note=BUILTIN_NOTE)


def load_template(spec: str, tokenizer: LoadedTokenizer | None = None) -> ChatTemplate:
    """Resolve ``--template``.

    ``auto``: the tokenizer's own template (its ``default`` when it has several, as transformers
    picks for a conversation without tools); with none, the built-in ChatML if the vocabulary has
    ChatML's tokens, else an error. ``chatml``: the built-in one. ``trl:NAME``: one of TRL's training
    templates (`packcli.chat.training`). A ``.jinja`` file; a ``tokenizer_config.json`` or a tokenizer
    directory (its default template); or the name of one of the tokenizer's templates (``tool_use``).

    Raises:
        InputError: a missing or unreadable file, no template where one is needed, an unknown name,
            or ChatML for a tokenizer without ChatML's tokens.
    """
    own = tokenizer.chat_templates() if tokenizer is not None else {}
    if spec == "auto":
        if own:
            return _pick_default(own, tokenizer)
        if tokenizer is not None and not _has_chatml_tokens(tokenizer):
            raise InputError(f"tokenizer {tokenizer.source} has no chat template, and ChatML's "
                             f"{' and '.join(CHATML_TOKENS)} are not tokens of its vocabulary",
                             "pass `template='FILE.jinja'` (e.g. TRL's llama3_training.jinja for Llama 3)")
        return builtin_chatml()
    if spec == "chatml":
        if tokenizer is not None and not _has_chatml_tokens(tokenizer):
            raise InputError(f"`template='chatml'`: {' and '.join(CHATML_TOKENS)} are not tokens of "
                             f"{tokenizer.source}; ChatML would be split into pieces",
                             "pass the model's own template with `template`")
        return ChatTemplate(builtin_chatml().text, BUILTIN_CHATML)
    if spec.startswith(TRL_PREFIX):
        return _from_trl(trl_template(spec))
    path = Path(spec)
    if path.is_dir():
        from packcli.tokenizer.load import find_chat_templates

        found = find_chat_templates(path)
        if not found:
            raise InputError(f"template {spec}: the directory has no chat template", "pass a .jinja file")
        template = _pick_default(found, None)
        return ChatTemplate(template.text, str(path / template.source.split(":", 1)[1]), template.name)
    if path.is_file():
        return _from_file(path)
    if spec in own:
        text, source = own[spec]
        return ChatTemplate(text, source, spec)
    names = f" (the tokenizer's templates: {', '.join(sorted(own))})" if own else ""
    raise InputError(f"template {spec}: no such file, and not a named template of the tokenizer{names}",
                     "use auto, chatml, a .jinja file, a tokenizer_config.json, or a template's name")


def resolve_template(spec: str, tokenizer: LoadedTokenizer, policy: LossPolicy) -> ChatTemplate:
    """`load_template`, and for a policy that may supervise assistant turns only (``auto`` too) a template
    without ``{% generation %}`` markers becomes the training template TRL maps it to, as TRL's
    SFTTrainer does under ``assistant_only_loss=True`` (`packcli.chat.training`); its note says so.

    Raises:
        InputError: as `load_template`; an explicit assistant-only policy with a template that has no
            markers and no TRL training template (the message says why: no trl, or no match).
    """
    template = load_template(spec, tokenizer)
    if template.has_generation_markers or policy not in ASSISTANT_POLICIES + (LossPolicy.auto,):
        return template
    try:
        found = trl_training_template(template.text, template.describe(), template.origin, tokenizer)
        template = template if found is None else _from_trl(found)
    except InputError:
        if policy is LossPolicy.auto:  # text and prompt/completion records need no markers; a chat record refuses
            return template
        raise
    require_markers(template, policy)
    return template


def require_markers(template: ChatTemplate, policy: LossPolicy) -> None:
    """Refuse an assistant-only policy with a template that cannot say what the assistant wrote.

    Called before any data is read when the policy is explicit; under ``auto`` the first chat record
    triggers the same error.

    Raises:
        InputError: the template has no ``{% generation %}`` markers.
    """
    if policy in ASSISTANT_POLICIES and not template.has_generation_markers:
        raise no_markers(template)


def no_markers(template: ChatTemplate) -> InputError:
    return InputError(
        f"template {template.describe()} has no {{% generation %}} markers, so assistant-only loss masks cannot be "
        "computed",
        training_hint(),
    )


def _pick_default(found: dict[str, tuple[str, str]], tokenizer: LoadedTokenizer | None) -> ChatTemplate:
    where = tokenizer.source if tokenizer is not None else "the tokenizer"
    if "default" not in found:
        raise InputError(f"{where} has several chat templates and none named default: {', '.join(sorted(found))}",
                         "pick one with `template='NAME'`")
    text, source = found["default"]
    others = sorted(n for n in found if n != "default")
    note = ""
    if others:
        note = (f"the tokenizer's default template; it also has {', '.join(others)} (pick with --template NAME"
                + ("; transformers uses tool_use for a conversation with tools" if "tool_use" in others else "") + ")")
    return ChatTemplate(text, source, "default", note)


def _from_trl(found: TrlTemplate) -> ChatTemplate:
    return ChatTemplate(found.text, TRL_PREFIX + found.name, note=found.note)


def _from_file(path: Path) -> ChatTemplate:
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"template {path}: cannot read ({exc})") from exc
    if path.suffix != ".json":
        return ChatTemplate(raw, str(path))
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from exc
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # named templates
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if not isinstance(template, str):
        raise InputError(f"{path}: has no (default) chat_template", "pass a .jinja file with `template`")
    return ChatTemplate(template, str(path), "default")


def _has_chatml_tokens(tokenizer: LoadedTokenizer) -> bool:
    return all(tokenizer.has_added_token(token) for token in CHATML_TOKENS)
