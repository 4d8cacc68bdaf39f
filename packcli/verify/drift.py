"""Contract drift: the tokenizer and template that reconstruction will use still hash as pinned."""

from __future__ import annotations

import hashlib
from pathlib import Path

from packcli.chat import load_template
from packcli.chat.templates import BUILTIN_CHATML, builtin_chatml
from packcli.choices import BackendChoice
from packcli.errors import InputError
from packcli.tokenizer import LoadedTokenizer, load_tokenizer
from packcli.tokenizer.load import TOKENIZER_SOURCE, find_chat_templates
from packcli.verify.report import CheckResult, Violation


def resolve(path: str, source_root: Path | None) -> Path:
    p = Path(path)
    return source_root / p if source_root is not None and not p.is_absolute() else p


def check_drift(manifest: dict, result: CheckResult, *, tokenizer: str | None, template: str | None,
                source_root: Path | None, require_tokenizer: bool) -> tuple[LoadedTokenizer | None, str | None]:
    """Tokenizer and template must hash as the manifest pins them.

    Returns the loaded tokenizer and the template text when they match (reconstruction needs both),
    else None for the one that drifted or could not be found.
    """
    pinned_tok, pinned_tpl = manifest["tokenizer"], manifest["template"]
    tok_path = Path(tokenizer) if tokenizer else resolve(pinned_tok["source"], source_root)
    loaded = None
    result.checked += 1
    if tok_path.exists():
        loaded = load_tokenizer(tok_path, backend=BackendChoice.tokenizers)  # the reference, always: a fast-path error cannot pass
        if loaded.sha256 != pinned_tok["sha256"]:
            result.fail(Violation(f"tokenizer changed: {tok_path} has sha256 {loaded.sha256[:16]}, "
                                  f"the manifest pins {pinned_tok['sha256'][:16]}"))
            loaded = None
    elif tokenizer or require_tokenizer:
        raise InputError(f"tokenizer {tok_path}: not found (reconstruction re-tokenizes with it)",
                         "pass --tokenizer, or --no-reconstruct to check the structure only")
    text = pinned_tpl["text"]
    result.checked += 1
    if hashlib.sha256(text.encode()).hexdigest() != pinned_tpl["sha256"]:
        result.fail(Violation("template text in the manifest does not match its sha256"))
        text = None
    current = _current_template(pinned_tpl, template, tok_path, source_root, loaded)
    if current is not None and hashlib.sha256(current.encode()).hexdigest() != pinned_tpl["sha256"]:
        where = template or pinned_tpl["source"]
        result.fail(Violation(f"template changed: {where} no longer hashes to the pinned "
                              f"{pinned_tpl['sha256'][:16]}"))
        text = None
    return loaded, text


def _current_template(pinned: dict, override: str | None, tok_path: Path, source_root: Path | None,
                      tokenizer: LoadedTokenizer | None) -> str | None:
    """The template text as it is now, where the manifest says it came from (None if not found)."""
    if override:
        return load_template(override, tokenizer).text
    source = pinned["source"]
    if source == BUILTIN_CHATML:
        return builtin_chatml().text
    if source.startswith(TOKENIZER_SOURCE):
        found = find_chat_templates(tok_path if tok_path.is_dir() else tok_path.parent)
        named = found.get(pinned.get("name") or "default")
        return named[0] if named is not None else None
    path = resolve(source, source_root)
    if path.exists():
        return load_template(str(path)).text
    return None
