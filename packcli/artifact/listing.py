"""What an artifact folder holds: exactly the files its manifest lists, each a regular file, and nothing else.

The folder is read by more than packcli. ``datasets.load_dataset(out)``, the command the dataset card
gives, merges a ``.huggingface.yaml`` beside the card into the card's YAML (its ``configs`` can point
the train split at another Parquet file, keep only some ``columns``, or add ``filters``), and reads
whatever files a pattern matches. A file nobody pinned can therefore change what a trainer trains on
while every pinned hash still holds. So the folder is a closed set: ``manifest.json``, the shards it
lists, the seam table, ``rejects.jsonl`` and the card; any other entry (a hidden file, a folder, a
symbolic link, an unlisted shard) is a stranger, and a listed name that is a link or a folder is one
too (a link can point elsewhere after the check). ``verify`` reports every stranger and
``packcli.data`` refuses to read such a folder.

The same rule says what ``pack --force`` may replace (`not_an_artifact`): a folder whose manifest carries
a hash that matches its content and that holds no stranger is one packcli wrote; anything else in it (a
note, a copy of the input, a subfolder) makes it the user's, and it is left alone. The manifest's own
hash is the marker: a stray ``manifest.json`` from another tool, or one edited by hand, does not make a
folder packcli's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from packcli.contract import MANIFEST_NAME

PINNED_FILES = ("seam_table", "rejects", "dataset_card")  # the manifest entries that pin one file each


def listed_names(manifest: dict) -> set[str]:
    """Every name the manifest lists as a file of the artifact (itself included)."""
    names = {MANIFEST_NAME}
    entries = [manifest.get(key) for key in PINNED_FILES]
    shards = manifest.get("shards")
    entries += shards if isinstance(shards, list) else []
    names.update(e["name"] for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str))
    return names


def strangers(directory: str | Path, manifest: dict) -> list[tuple[str, str]]:
    """``(name, what it is)`` of every entry of ``directory`` that is not a listed regular file, sorted by name."""
    listed = listed_names(manifest)
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            kind = ("a symbolic link" if entry.is_symlink() else "a folder" if entry.is_dir(follow_symlinks=False)
                    else "a file" if entry.is_file(follow_symlinks=False) else "a special file")
            if entry.name not in listed or kind != "a file":
                found.append((entry.name, kind))
    return sorted(found)


def describe_stranger(name: str, kind: str, listed: bool) -> str:
    """What is wrong with one stranger and what to do, in one line."""
    if listed:
        return (f"{name} is {kind}, not a regular file: a link or folder under a pinned name can change what a "
                "reader gets after it was checked; replace it with the file itself")
    why = ("datasets.load_dataset reads it as the dataset card's YAML, so it can redirect, narrow or filter what a "
           "trainer loads" if name == ".huggingface.yaml" else
           "a reader that globs the folder (load_dataset, a Hub upload) may pick it up")
    return f"{name} ({kind}) is not part of the artifact: the manifest does not list it, and {why}; remove it"


def not_an_artifact(directory: Path) -> str | None:
    """None when ``directory`` is a packcli artifact (see the module docstring), else why not, in a
    few words that name the first entry that is not the artifact's."""
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
    found = strangers(directory, manifest)
    if found:
        return f"holds {found[0][0]}, which its {MANIFEST_NAME} does not list"
    return None
