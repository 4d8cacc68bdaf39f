"""TRL's training templates: the one TRL maps a chat template to, and ``--template trl:NAME``.

Assistant-only loss needs ``{% generation %}`` markers, which few models' own templates have. TRL ships
training versions of the common ones (``trl/chat_templates/*_training.jinja``) and, under
``assistant_only_loss=True``, swaps one in by an exact match of the tokenizer's template
(``trl.chat_template_utils.get_training_chat_template``). packcli asks that same function, in the
installed trl, at run time: the mapping and the templates are TRL's, never copied here, so a TRL
upgrade that adds or fixes one is picked up, and the manifest pins the text that was used.

Only a template TRL may know imports trl (which imports torch and transformers: 5-8 CPU seconds, most
of a small job's start): TRL recognises a template by exact identity with a file it ships, so a template
equal to none of them is answered without the import, and TRL's answer for one it knows is remembered
per trl version and template (`MAPPING_CACHE`), so the import is paid once per machine, not per run.
``trl:NAME`` reads the file from trl's folder without importing it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import uuid
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from packcli.errors import InputError

if TYPE_CHECKING:
    from packcli.tokenizer import LoadedTokenizer

MAPPING_CACHE = "trl-training-templates.json"
"""Under ``$XDG_CACHE_HOME/packcli`` (``~/.cache/packcli``): ``{"TRL_VERSION TEMPLATE_SHA256": NAME}``, the
training template TRL's ``get_training_chat_template`` answered, by the name of the file it ships."""
TRL_PREFIX = "trl:"
TRAINING_SUFFIX = "_training.jinja"
INSTALL_TRL = "pip install trl"


class TrlTemplate(NamedTuple):
    """One of TRL's training templates: its text, its name (``qwen3_training``), and why it is used, in
    words. `packcli.chat.templates` makes it a ``ChatTemplate`` of origin ``trl:NAME``."""

    text: str
    name: str
    note: str


def trl_templates_dir() -> Path | None:
    """trl's ``chat_templates`` folder, found without importing trl (None: trl is not installed)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "chat_templates"
    return folder if folder.is_dir() else None


def trl_version() -> str:
    try:
        return metadata.version("trl")
    except metadata.PackageNotFoundError:
        return "?"


def training_names(folder: Path | None = None) -> list[str]:
    """The names ``--template trl:NAME`` takes: TRL's shipped ``*_training.jinja``, without the suffix."""
    folder = folder or trl_templates_dir()
    return sorted(p.name.removesuffix(".jinja") for p in folder.glob("*" + TRAINING_SUFFIX)) if folder else []


def trl_template(spec: str) -> TrlTemplate:
    """``trl:NAME`` (or ``trl:NAME.jinja``): one of TRL's training templates, read from the installed trl.

    Raises:
        InputError: trl is not installed, or has no training template of that name.
    """
    name = spec.removeprefix(TRL_PREFIX).removesuffix(".jinja")
    folder = trl_templates_dir()
    if folder is None:
        raise InputError(f"`template='{spec}'`: trl is not installed, so its templates cannot be read",
                         f"{INSTALL_TRL}, or pass the .jinja file itself")
    path = folder / f"{name}.jinja"
    if not name.endswith(TRAINING_SUFFIX.removesuffix(".jinja")) or not path.is_file():
        raise InputError(f"`template='{spec}'`: trl {trl_version()} has no training template {name!r}",
                         f"TRL's training templates: {', '.join(training_names(folder))}")
    return TrlTemplate(path.read_text(encoding="utf-8"), name, f"TRL {trl_version()}'s {path.name}")


def trl_training_template(text: str, described: str, origin: str, tokenizer: LoadedTokenizer) -> TrlTemplate | None:
    """The training template TRL's ``get_training_chat_template`` maps the template ``text`` to, for
    ``tokenizer`` (None: TRL finds nothing to patch, the template has markers after all). ``described``
    and ``origin`` name the template in the messages.

    TRL's function is asked with a transformers tokenizer built from the same file, holding ``text``
    as its chat template, as SFTTrainer asks it with the model's tokenizer.

    Raises:
        InputError: trl is not installed, or TRL has no training template for this one; the message
            says which, and what to do.
    """
    lacks = f"template {described} has no {{% generation %}} markers, so assistant-only loss masks cannot be computed"
    folder = trl_templates_dir()
    if folder is None:
        raise InputError(f"{lacks}, and trl is not installed, so TRL's training template for it cannot be looked up",
                         f"{INSTALL_TRL} (packcli then uses the training template TRL maps this one to, where TRL "
                         "has one), pass `template='trl:NAME'` or a .jinja with the markers, or use `loss='all'`")
    no_match = InputError(f"{lacks}, and trl {trl_version()} has no training template for it "
                          "(trl.chat_template_utils.get_training_chat_template knows the templates of the models "
                          "in trl/chat_templates)",
                          "pass `template='trl:NAME'` if one of TRL's fits this model (packcli verify --render-oracle "
                          "transformers checks the masks), or a .jinja with the markers, or use `loss='all'`")
    # TRL recognises a template by exact identity with one of the files it ships (trl/chat_templates/README.md):
    # none equal, no match, and importing trl (torch, transformers: seconds) is not worth it.
    if not any(p.read_text(encoding="utf-8") == text for p in folder.glob("*.jinja")):
        raise no_match
    key = f"{trl_version()} {hashlib.sha256(text.encode('utf-8')).hexdigest()}"
    name = _remembered().get(key)
    if name is not None and (folder / f"{name}.jinja").is_file():
        return _training(folder, name, origin)
    try:
        from transformers import PreTrainedTokenizerFast
        from trl.chat_template_utils import get_training_chat_template
    except ImportError as exc:
        raise InputError(f"{lacks}, and trl cannot be imported ({exc})",
                         "repair the trl installation, or pass `template='trl:NAME'`, or use `loss='all'`") from exc
    hf = PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer, bos_token=tokenizer.bos_token,
                                 eos_token=tokenizer.eos_token)
    hf.chat_template = text
    try:
        training = get_training_chat_template(hf)
    except ValueError:
        raise no_match from None
    if training is None:  # TRL finds nothing to patch: the template has markers after all
        return None
    name = next((p.name.removesuffix(".jinja") for p in sorted(folder.glob("*" + TRAINING_SUFFIX))
                 if p.read_text(encoding="utf-8") == training), None)
    if name is None:  # a text TRL made up rather than shipped: used as it is, never remembered
        return TrlTemplate(training, "get_training_chat_template", _note("get_training_chat_template", origin))
    _remember(key, name)
    return _training(folder, name, origin)


def _training(folder: Path, name: str, origin: str) -> TrlTemplate:
    return TrlTemplate((folder / f"{name}.jinja").read_text(encoding="utf-8"), name, _note(name, origin))


def _note(name: str, origin: str) -> str:
    return (f"TRL {trl_version()}'s {name}.jinja, the training template TRL maps {origin} to "
            "(get_training_chat_template): assistant-only loss needs {% generation %} markers, which it lacks")


def mapping_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "packcli" / MAPPING_CACHE


def _remembered() -> dict[str, str]:
    """The remembered answers; empty where the file is missing or unreadable (the answer is asked again)."""
    try:
        found = json.loads(mapping_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, dict) else {}


def _remember(key: str, name: str) -> None:
    """Add one answer, written whole or not at all; a cache that cannot be written is only a slower next run."""
    path = mapping_cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps({**_remembered(), key: name}, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def training_hint() -> str:
    """What to do about a template without markers, as far as this environment can tell."""
    if trl_templates_dir() is None:
        return (f"{INSTALL_TRL} (packcli then uses the training template TRL maps the tokenizer's template to, where "
                "TRL has one), or pass `template='trl:NAME'` or a .jinja with {% generation %} markers, or use "
                "`loss='all'`")
    return ("packcli uses the training template TRL maps a template to where TRL has one; for this one pass "
            f"`template='trl:NAME'` if one of TRL's fits the model ({', '.join(training_names()[:4])}, ...), or a "
            ".jinja with {% generation %} markers, or use `loss='all'`")
