"""Finding the files a manifest pins: its sources, tokenizer and template, wherever they are now.

The hashed manifest names content only (a base name, a size, a sha256); where the files were when
``pack`` ran is in ``unhashed.provenance``. A file is looked for at that path (relative paths from
``--source-root``, else from the working directory), then, with ``--source-root``, under it by name.
What is found is always checked against the pinned hash by the caller, so a wrong guess is a
violation ("changed since packing"), never a silent substitute.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from packcli.artifact.manifest import InputPin, Manifest
from packcli.tokenizer.hub import TOKENIZER_FILES
from packcli.tokenizer.load import tokenizer_json

if TYPE_CHECKING:
    from packcli.ingest import Source


def at(path: str | None, root: Path | None) -> Path | None:
    """``path`` as ``pack`` was given it, resolved from ``root`` (else the working directory)."""
    if not path:
        return None
    p = Path(path)
    return root / p if root is not None and not p.is_absolute() else p


def find_source(manifest: Manifest, index: int, root: Path | None) -> Path | None:
    """Input ``index`` of the manifest: at its provenance path, else the file (or ``datasets``
    directory) under ``root`` with its name, size and sha256 (None if neither is there)."""
    pinned = manifest.inputs[index]
    paths = manifest.provenance.get("inputs", [])
    here = at(paths[index] if index < len(paths) else None, root)
    if here is not None and here.exists():
        return here
    if root is not None:
        for candidate in sorted(root.rglob(pinned.name)):
            if _holds(candidate, pinned):
                return candidate
    return here


def locate_input(manifest: Manifest, k: int, source_root: Path | None) -> Source:
    """Input ``k`` of a manifest, found where verify runs (`find_source`; a
    ``hf:`` name from the local cache).

    Raises:
        InputError: it is not there (or, for ``hf:``, not in the local cache).
    """
    from packcli.errors import InputError
    from packcli.ingest import HUB_PREFIX, source_of

    pinned = manifest.inputs[k]
    if pinned.name.startswith(HUB_PREFIX):
        from packcli.ingest.hf import hub_source

        return hub_source(pinned.name)
    path = find_source(manifest, k, source_root)
    if path is None or not path.exists():
        raise InputError(f"source {path or pinned.name}: no such file (input {k} of the manifest, "
                         f"{pinned.name}, sha256 {pinned.sha256[:16]})",
                         "run verify from the directory pack ran in, or pass `source_root` (searched by name)")
    return source_of(path)


def _holds(candidate: Path, pinned: InputPin) -> bool:
    """Whether ``candidate`` is the input ``pinned`` names: the same size and sha256, as `describe_input` takes them."""
    from packcli.errors import InputError
    from packcli.ingest import describe_input, source_of

    try:
        described = describe_input(source_of(candidate))
    except (InputError, OSError):  # a directory that is not a dataset, an unreadable file
        return False
    return described.size == pinned.size and described.sha256 == pinned.sha256


def find_tokenizer(manifest: Manifest, root: Path | None, override: str | None = None) -> Path | None:
    """The pinned tokenizer, where verify, show and the self-test look for it: ``override`` (a ``--tokenizer``
    the user gave: a path or a Hub name) when given, else its provenance path (a Hub name: its snapshot in the
    local cache), else a tokenizer.json(.gz) under ``root`` with the pinned sha256. The caller loads it and
    checks the sha256 (a ``--tokenizer`` is taken as given, and must hash as pinned too)."""
    if override:
        from packcli.tokenizer.hub import resolve_tokenizer_path

        return resolve_tokenizer_path(override)
    given = manifest.provenance.get("tokenizer")
    here = at(given, root)
    if here is not None and here.exists():
        return here
    cached = _cached_snapshot(given)
    if cached is not None:
        return cached
    if root is not None:
        for name in TOKENIZER_FILES:
            for candidate in sorted(root.rglob(name)):
                if candidate.is_file() and _tokenizer_sha256(candidate) == manifest.tokenizer.sha256:
                    return candidate
    return here


def _cached_snapshot(given: str | None) -> Path | None:
    """The cached snapshot a Hub tokenizer name resolves to (None: not a Hub name, or not cached here)."""
    from packcli.errors import InputError
    from packcli.tokenizer.hub import parse_hub_name, resolve_tokenizer_path

    if not given or parse_hub_name(given) is None:
        return None
    try:
        return resolve_tokenizer_path(given)
    except InputError:
        return None


def find_template_file(manifest: Manifest, root: Path | None) -> Path | None:
    """A ``file:NAME`` template at its provenance path, else a file under ``root`` with its name and text."""
    pinned = manifest.template
    here = at(manifest.provenance.get("template"), root)
    if here is not None and here.is_file():
        return here
    name = pinned.origin.removeprefix("file:")
    if root is not None:
        for candidate in sorted(root.rglob(name)):
            if candidate.is_file() and _template_sha256(candidate) == pinned.sha256:
                return candidate
    return here


def _tokenizer_sha256(path: Path) -> str | None:
    """As `packcli.tokenizer.load_tokenizer` pins it (`packcli.tokenizer.load.tokenizer_json`; None: unreadable)."""
    try:
        return hashlib.sha256(tokenizer_json(path)).hexdigest()
    except (OSError, EOFError):
        return None


def _template_sha256(path: Path) -> str | None:
    from packcli.chat import load_template
    from packcli.errors import InputError

    try:
        return load_template(str(path)).sha256
    except (InputError, UnicodeDecodeError):
        return None
