"""Tokenizers by Hub name, offline: ``ORG/NAME`` or ``hf:ORG/NAME[@REVISION]`` from the local Hugging
Face cache, laid out as huggingface_hub writes it and found as transformers finds it::

    $HF_HUB_CACHE/models--ORG--NAME/
        refs/main                     the commit a branch or tag points at
        snapshots/<commit>/tokenizer.json, tokenizer_config.json, chat_template.jinja  (links into blobs/)

The cache is ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``: huggingface_hub's order,
read when a name is resolved (huggingface_hub reads it once, at import).

The layout is read here, not through huggingface_hub: that library is not a dependency of packcli,
and the layout is documented and stable. tests/test_tokenizer_hub.py builds a cache and checks every
answer against huggingface_hub's own ``try_to_load_from_cache`` and ``snapshot_download(local_files_only=True)``
wherever it is installed. A name that is also a path on disk is the path (transformers' rule).
Nothing is downloaded: a miss says what is missing and prints the ``hf download`` command.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from packcli.contract import HUB_PREFIX
from packcli.errors import InputError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.json.gz")
DEFAULT_REVISION = "main"
# huggingface_hub's REPO_ID_REGEX: an optional namespace and a name of ASCII word characters, '-' and '.'
_REPO_ID = re.compile(r"(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", flags=re.ASCII)


@dataclass(frozen=True)
class HubName:
    """A model repository on the Hub, at a revision (a branch, a tag or a commit hash)."""

    repo_id: str
    revision: str = DEFAULT_REVISION

    @property
    def folder(self) -> str:
        """The repository's folder in the cache (huggingface_hub's ``repo_folder_name``)."""
        return "--".join(["models", *self.repo_id.split("/")])

    def download_command(self) -> str:
        """The command that puts this tokenizer's files into the cache."""
        revision = f" --revision {self.revision}" if self.revision != DEFAULT_REVISION else ""
        return f"hf download {self.repo_id}{revision} --include 'tokenizer*' 'chat_template*'"


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloads, from the environment as it is now."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    home = os.path.expandvars(os.path.expanduser(home))
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(cache)))


def parse_hub_name(spec: str) -> HubName | None:
    """``hf:NAME``, ``hf:ORG/NAME`` or a bare ``ORG/NAME``, each with an optional ``@REVISION``, as a
    `HubName`; None for anything else (a path). A bare name needs its namespace: ``gpt2`` is a path."""
    text = spec.removeprefix(HUB_PREFIX)
    name, _, revision = text.partition("@")
    if not spec.startswith(HUB_PREFIX) and name.count("/") != 1:
        return None
    if name.count("/") > 1 or "--" in name or ".." in name or not _REPO_ID.fullmatch(name):
        return None
    return HubName(name, revision or DEFAULT_REVISION)


def snapshot_dir(name: HubName, cache: Path | None = None) -> Path:
    """The cached snapshot of ``name`` at its revision (a branch or tag through ``refs/``, a commit as is).

    Raises:
        InputError: the repository, the revision or its snapshot is not in the cache, with the
            command that fetches it.
    """
    cache = hub_cache_dir() if cache is None else cache
    repo = cache / name.folder
    hint = (f"packcli never downloads; fetch it with: {name.download_command()}, then pass -t {name.repo_id} again "
            "or the path it prints")
    if not repo.is_dir():
        raise InputError(f"tokenizer {name.repo_id}: not in the local Hugging Face cache ({cache} has no "
                         f"{name.folder})", hint)
    ref = repo / "refs" / name.revision
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else name.revision
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        cached = sorted(p.name for p in (repo / "refs").glob("*") if p.is_file()) if (repo / "refs").is_dir() else []
        known = f" (cached revisions: {', '.join(cached)})" if cached else ""
        raise InputError(f"tokenizer {name.repo_id}: revision {name.revision} is not in the local Hugging Face "
                         f"cache{known}", hint)
    return snapshot


def resolve_tokenizer_path(spec: str | Path) -> Path:
    """Where ``--tokenizer`` points: the path itself when it exists (or is not a Hub name), else the
    cached snapshot of the Hub name, which must hold a ``tokenizer.json``.

    Raises:
        InputError: a Hub name (and no such path) that is not in the cache, or whose snapshot has no
            tokenizer.json.
    """
    path = Path(spec)
    text = str(spec)
    explicit = text.startswith(HUB_PREFIX)
    if not explicit and path.exists():
        return path
    name = parse_hub_name(text)
    if name is None:
        if explicit:
            raise InputError(f"tokenizer {text}: not a Hub repository name", "write hf:ORG/NAME or hf:ORG/NAME@REVISION")
        return path
    try:
        snapshot = snapshot_dir(name)
    except InputError as exc:
        if explicit:
            raise
        raise InputError(f"tokenizer {text}: no such file or directory, and "
                         + exc.message.removeprefix(f"tokenizer {name.repo_id}: "), exc.hint) from None
    if not any((snapshot / f).is_file() for f in TOKENIZER_FILES):
        raise InputError(f"tokenizer {text}: the cached snapshot {snapshot} has no tokenizer.json",
                         f"fetch it with: {name.download_command()}")
    return snapshot
