"""The contract manifest: everything that shapes a seam, pinned by hashes, hashed itself.

The manifest is written last, so a directory without one was never finished. Its hash is taken over
canonical JSON (sorted keys, compact separators, UTF-8) of every field except ``manifest_sha256``
itself and ``unhashed`` (the creation time, host, command line, library versions, tokenizer backend
and the paths the inputs, tokenizer and template were read from: facts about the run, not about the
data). The hashed fields name content only (file names, sizes, sha256s), never a location, and every
one of them is a field ``verify`` proves from the artifact and its sources (`packcli.verify.fields`);
a fact it cannot prove goes to ``unhashed``. The same inputs and config therefore give the same hash
on any machine that makes the same bytes, from any directory.

Version rule: ``CONTRACT_VERSION`` goes up when a column, the label or position convention, or the
meaning of a manifest field changes (docs/contract.md). Readers refuse versions they do not know.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from packcli.contract import CONTRACT_VERSION, MANIFEST_NAME
from packcli.errors import ContractError, InputError

UNHASHED_KEYS = ("manifest_sha256", "unhashed")


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def manifest_hash(manifest: dict) -> str:
    """sha256 over the canonical form of the hashed fields."""
    return hashlib.sha256(canonical_json({k: v for k, v in manifest.items() if k not in UNHASHED_KEYS})).hexdigest()


def versions() -> dict[str, str]:
    """Versions of everything that can move a seam or a byte of the output."""
    import numba
    import numpy
    import pyarrow
    import tokenizers

    from packcli import __version__

    return {"packcli": __version__, "python": platform.python_version(), "tokenizers": tokenizers.__version__,
            "pyarrow": pyarrow.__version__, "numpy": numpy.__version__, "numba": numba.__version__}


def finalize(manifest: dict, run_facts: dict | None = None) -> dict:
    """Add the unhashed run facts (creation time in UTC, host, argv, pid, library versions, and ``run_facts``)
    and the manifest hash."""
    manifest = dict(manifest, contract_version=CONTRACT_VERSION)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest["unhashed"] = {"created": created, "host": platform.node(), "argv": sys.argv[1:], "pid": os.getpid(),
                            "versions": versions(), **(run_facts or {})}
    manifest["manifest_sha256"] = manifest_hash(manifest)
    return manifest


def write_manifest(manifest: dict, directory: Path) -> Path:
    path = directory / MANIFEST_NAME
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_manifest(directory: Path, *, contracts: tuple[int, ...] = (CONTRACT_VERSION,)) -> dict:
    """Read a manifest and refuse a contract version this reader does not take.

    Args:
        contracts: the versions the caller reads: this packcli's, or for a reader of the packs alone
            (`packcli.data`) every version with the same shards (`packcli.contract.SHARD_CONTRACTS`).

    Raises:
        InputError: no manifest (not an artifact, or an unfinished run).
        ContractError: unreadable manifest or a version not in ``contracts``.
    """
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        raise InputError(f"{directory}: no {MANIFEST_NAME}; not a packcli artifact (or an interrupted run)",
                         "pass the `out` directory of a finished `packcli pack`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ContractError(f"{path}: not valid JSON ({exc})") from exc
    version = manifest.get("contract_version") if isinstance(manifest, dict) else None
    if version in contracts:
        return manifest
    if isinstance(version, int) and 0 < version < CONTRACT_VERSION:
        raise ContractError(f"{path}: made by an older contract ({version}); this packcli reads contract "
                            f"{CONTRACT_VERSION} (docs/contract.md, version history)",
                            f"rebuild with: {rebuild_command(manifest, directory)}")
    raise ContractError(f"{path}: contract version {version!r} is not supported (this packcli reads "
                        f"{CONTRACT_VERSION})", "use the packcli version that wrote it, or re-pack with this one")


def rebuild_command(manifest: dict, directory: str | Path) -> str:
    """The ``packcli pack`` command that rebuilds an artifact from what its manifest pinned.

    Reads contract 1's fields (inputs' paths, tokenizer and template sources in the hashed part) and
    contract 2's (paths in ``unhashed.provenance``, the column mapping, dedupe, mixture, template date),
    so it works on the old manifests it exists for. A mixture source of several inputs has no ``--mix``
    key of its own; the command then says so instead of guessing one.
    """
    config = manifest.get("config", {})
    where = manifest.get("unhashed", {}).get("provenance") or {}
    inputs = where.get("inputs") or [i.get("path", "INPUT") for i in manifest.get("inputs", [])]
    tokenizer = str(where.get("tokenizer") or manifest.get("tokenizer", {}).get("source", "TOKENIZER"))
    pinned = manifest.get("template", {})
    template = str(where.get("template") or pinned.get("source", "auto"))
    own_config = ("tokenizer_config.json", "tokenizer:tokenizer_config.json")  # contracts 1 and 2 spell it so
    if tokenizer.endswith("tokenizer.json") and template in own_config:
        tokenizer = str(Path(tokenizer).parent)  # the directory: its tokenizer_config.json holds the template
    if template.startswith("tokenizer:"):  # contract 2: one of the tokenizer's own templates, by name
        template = pinned.get("name") or "auto"
        template = "auto" if template == "default" else template
    template = {"builtin:chatml": "chatml", "tokenizer_config.json": "auto"}.get(template, template)
    args = ["packcli", "pack", *(str(i) for i in inputs), "-t", tokenizer, "-o", str(directory), "--force"]
    options = {"--template": template, "--loss": manifest.get("loss_policy"), "-c": config.get("capacity"),
               "--strategy": config.get("strategy"), "--seed": config.get("seed"),
               "--overlong": config.get("overlong"), "--format": config.get("input_format"),
               "--packs-per-shard": config.get("packs_per_shard"),
               "--window": config.get("window") if config.get("strategy") == "window" else None,
               "--min-density": config.get("min_density"), "--max-displacement": config.get("max_displacement"),
               "--max-reject-fraction": config.get("max_reject_fraction"), "--dedupe": config.get("dedupe"),
               "--template-date": config.get("template_date"),
               **{f"--{part}-field": name for part, name in (config.get("fields") or {}).items()}}
    note = ""
    mix = config.get("mix")
    if mix:
        repeat = "x" if mix["by"] == "repeat" else ""
        if all(len(s["inputs"]) == 1 for s in mix["sources"]):
            options["--mix"] = ",".join(f"{inputs[s['inputs'][0]]}={s['weight']:g}{repeat}" for s in mix["sources"])
        else:
            note = " (and --mix as the run gave it: a source of several inputs, " + "; ".join(
                f"{[str(inputs[i]) for i in s['inputs']]}={s['weight']:g}{repeat}" for s in mix["sources"]) + ")"
    for flag, value in options.items():
        if value is not None and value != "auto" and not (flag == "--dedupe" and value == "none"):
            args += [flag, str(value)]
    for name in config.get("allow_dropped_fields") or ():
        args += ["--allow-dropped-fields", str(name)]
    args += [] if config.get("shuffle", True) else ["--no-shuffle"]
    args += [] if config.get("shuffle_packs", True) else ["--no-shuffle-packs"]
    return shlex.join(args) + note
