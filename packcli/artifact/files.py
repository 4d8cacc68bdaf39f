"""Which files make an artifact: the ones its manifest lists, and nothing else.

An artifact folder is a closed set: ``manifest.json`` and the files it names (shards, seam table,
rejects, dataset card). A folder whose manifest carries a hash that matches its content and that
holds nothing the manifest does not list is one packcli wrote, so ``pack --force`` may replace it;
anything else in the folder (a note, a copy of the input, a subfolder) makes it the user's, and it
is left alone. The manifest's own hash is the marker: a stray ``manifest.json`` from another tool,
or one edited by hand, does not make a folder packcli's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from packcli.contract import MANIFEST_NAME

# The manifest's entries that name one file each (a contract 1 manifest has no dataset card).
FILE_ENTRIES = ("seam_table", "rejects", "dataset_card")


def listed_files(manifest: dict) -> set[str]:
    """The names of the files an artifact holds, as its manifest lists them (the manifest included)."""
    names = {MANIFEST_NAME}
    for key in FILE_ENTRIES:
        entry = manifest.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            names.add(entry["name"])
    for shard in manifest.get("shards") or []:
        if isinstance(shard, dict) and isinstance(shard.get("name"), str):
            names.add(shard["name"])
    return names


def unlisted_entries(directory: Path, manifest: dict) -> list[str]:
    """The entries of ``directory`` that are not plain files its manifest lists, sorted by name."""
    listed = listed_files(manifest)
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.name not in listed or not e.is_file(follow_symlinks=False))


def not_an_artifact(directory: Path) -> str | None:
    """None when ``directory`` is a packcli artifact (see the module docstring), else why not, in a
    few words that name the first file that is not the artifact's."""
    from packcli.artifact.manifest import manifest_hash

    manifest_path = Path(directory) / MANIFEST_NAME
    if manifest_path.is_symlink() or not manifest_path.is_file():
        first = next(iter(sorted(os.listdir(directory))), None)
        return f"holds {first}, and no {MANIFEST_NAME}" if first else "is empty"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return f"its {MANIFEST_NAME} is not one packcli wrote (not JSON)"
    if not isinstance(manifest, dict) or manifest.get("manifest_sha256") != manifest_hash(manifest):
        return f"its {MANIFEST_NAME} is not one packcli wrote (its hash does not match)"
    foreign = unlisted_entries(directory, manifest)
    if foreign:
        return f"holds {foreign[0]}, which its {MANIFEST_NAME} does not list"
    return None
