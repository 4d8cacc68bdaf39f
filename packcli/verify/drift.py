"""Contract drift: the tokenizer and template that reconstruction will use still hash as pinned, the
tokenizer's special tokens are the ones pinned, and the template found has the pinned origin (a file's
name: ``file:NAME``).

Where they are comes from `packcli.verify.locate` (the manifest pins content, not locations).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from packcli.artifact.manifest import Manifest
from packcli.chat import ChatTemplate, load_template
from packcli.chat.templates import BUILTIN_CHATML, builtin_chatml
from packcli.chat.training import TRL_PREFIX
from packcli.choices import BackendChoice
from packcli.errors import InputError
from packcli.tokenizer import LoadedTokenizer, load_tokenizer
from packcli.tokenizer.load import TOKENIZER_SOURCE, find_chat_templates
from packcli.verify.locate import find_template_file, find_tokenizer
from packcli.verify.report import CheckResult, Violation


def check_drift(manifest: Manifest, result: CheckResult, *, tokenizer: str | None, template: str | None,
                source_root: Path | None, require_tokenizer: bool) -> tuple[LoadedTokenizer | None, str | None]:
    """Tokenizer and template must hash as the manifest pins them.

    Returns the loaded tokenizer and the template text when they match (reconstruction needs both),
    else None for the one that drifted or could not be found.
    """
    pinned_tok, pinned_tpl = manifest.tokenizer, manifest.template
    tok_path = find_tokenizer(manifest, source_root, tokenizer)
    loaded = None
    result.checked += 1
    if tok_path is not None and tok_path.exists():
        loaded = load_tokenizer(tok_path, backend=BackendChoice.tokenizers)  # the reference, always: a fast-path error cannot pass
        if loaded.sha256 != pinned_tok.sha256:
            result.fail(Violation(f"tokenizer changed: {tok_path} has sha256 {loaded.sha256[:16]}, "
                                  f"the manifest pins {pinned_tok.sha256[:16]}", field="tokenizer.sha256"))
            loaded = None
        else:
            # The renderer appends and inserts these: pinned as the tokenizer has them, or reconstruction would
            # reproduce a forged one.
            wrong = [key for key in ("bos_token", "eos_token") if getattr(loaded, key) != getattr(pinned_tok, key)]
            for key in wrong:
                result.fail(Violation(f"tokenizer.{key} is {getattr(pinned_tok, key)!r}, but the tokenizer's is "
                                      f"{getattr(loaded, key)!r}", field=f"tokenizer.{key}"))
            loaded = None if wrong else loaded
    elif tokenizer or require_tokenizer:
        raise InputError(f"tokenizer {tok_path or '(no path recorded)'}: not found (reconstruction re-tokenizes "
                         "with it)",
                         "pass `tokenizer` or `source_root`, or `reconstruct=False` to check the structure only")
    text = pinned_tpl.text
    result.checked += 1
    if hashlib.sha256(text.encode()).hexdigest() != pinned_tpl.sha256:
        result.fail(Violation("template.text in the manifest does not hash to template.sha256", field="template.text"))
        text = None
    current, where, found = _current_template(manifest, template, tok_path, source_root, loaded)
    if found is not None and (found.origin, found.name) != (pinned_tpl.origin, pinned_tpl.name):
        # where it came from is hashed: proved, not trusted
        result.fail(Violation(f"template.origin is {pinned_tpl.origin!r} (name {pinned_tpl.name!r}), but the "
                              f"template was read from {where}: origin {found.origin!r} (name {found.name!r})",
                              field="template.origin" if found.origin != pinned_tpl.origin else "template.name"))
    if current is None and require_tokenizer:  # as for the tokenizer: --no-reconstruct needs neither file
        named = f" (template.name {pinned_tpl.name!r})" if pinned_tpl.name else ""
        result.fail(Violation(f"template.origin {pinned_tpl.origin!r}{named}: no template at {where}, so it "
                              "cannot be shown unchanged", field="template.origin"))
    elif current is not None and hashlib.sha256(current.encode()).hexdigest() != pinned_tpl.sha256:
        result.fail(Violation(f"template changed: {where} no longer hashes to the pinned template.sha256 "
                              f"{pinned_tpl.sha256[:16]}", field="template.sha256"))
        text = None
    return loaded, text


def _current_template(manifest: Manifest, override: str | None, tok_path: Path | None, source_root: Path | None,
                      tokenizer: LoadedTokenizer | None) -> tuple[str | None, str, ChatTemplate | None]:
    """The template text as it is now where the manifest says it came from (None if not found), that place,
    and, for a template not read by its pinned origin and name (a file, the built-in, ``--template``), what
    was found there: its origin and name are compared with the pinned ones."""
    pinned = manifest.template
    origin = pinned.origin
    if override:
        found = load_template(override, tokenizer)
        return found.text, override, found
    if origin == BUILTIN_CHATML:
        return builtin_chatml().text, origin, builtin_chatml()
    if origin.startswith(TRL_PREFIX):  # one of TRL's training templates, in the trl installed here
        try:
            found = load_template(origin)
        except InputError as exc:
            return None, f"{origin} ({exc.message})", None
        return found.text, origin, found
    if origin.startswith(TOKENIZER_SOURCE):  # one of the tokenizer's own templates, by its name there
        if tok_path is None:
            return None, origin, None
        directory = tok_path if tok_path.is_dir() else tok_path.parent
        named = find_chat_templates(directory).get(pinned.name or "default")
        here = named is not None and named[1] == origin  # the named template, and in the file the origin names
        return (named[0] if here else None), str(directory / origin.removeprefix(TOKENIZER_SOURCE)), None
    path = find_template_file(manifest, source_root)
    if path is not None and path.is_file():
        found = load_template(str(path))
        return found.text, str(path), found
    return None, origin, None
