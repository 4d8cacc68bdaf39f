"""The contract manifest: everything that shapes a seam, pinned by hashes, hashed itself.

The manifest is written last, so a directory without one was never finished. Its hash is taken over
canonical JSON (sorted keys, compact separators, UTF-8) of every field except ``manifest_sha256``
itself and ``unhashed`` (the creation time, host, command line, library versions, tokenizer backend
and the paths the inputs, tokenizer and template were read from: facts about the run, not about the
data). The hashed fields name content only (file names, sizes, sha256s), never a location, and every
one of them is a field ``verify`` proves from the artifact and its sources (`packcli.verify.owners`);
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
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from packcli.artifact.fieldspec import UNHASHED_KEYS, value_problems
from packcli.contract import CONTRACT_VERSION, MANIFEST_NAME
from packcli.errors import ContractError, InputError


@dataclass(frozen=True)
class PackSettings:
    """The run's settings that shape a seam or a loss decision: the manifest's ``config``, field for field.

    The one spelling of them: pack builds it from its `packcli.config.PackConfig` (``window`` resolved
    there, once), the planner (`packcli.job.plan`) and verify's re-run plan read it, and it writes the
    manifest's ``config`` (`to_dict`). Values are held as the manifest holds them (a policy as its name),
    so a forged manifest read back is still one: verify judges the values (`packcli.verify.replan`).
    """

    capacity: int
    loss: str
    input_format: str
    strategy: str
    window: int | None  # resolved: the window the strategy packs with (None unless strategy=window)
    seed: int
    shuffle: bool
    shuffle_packs: bool
    overlong: str
    split_overlap: int
    split_min_last: int
    min_density: float | None
    max_displacement: float | None
    max_reject_fraction: float
    packs_per_shard: int
    template_date: str
    dedupe: str
    text_bos: str
    text_eos: str
    fields: Mapping[str, str]  # the column mapping's renames (`packcli.ingest.fields.FieldMap.renames`)
    mix: Mapping[str, Any] | None = None  # `packcli.mix.Mixture.to_manifest`
    allow_dropped_fields: tuple[str, ...] | None = None  # None: not given (the manifest then has no key)

    # The settings that decide which pack and shard an example lands in (how verify's plan check names them).
    PLACEMENT: ClassVar[tuple[str, ...]] = ("strategy", "capacity", "window", "seed", "shuffle", "shuffle_packs",
                                            "packs_per_shard")

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> PackSettings:
        """From a manifest's ``config``.

        Raises:
            KeyError: a setting is missing.
        """
        allowed = data.get("allow_dropped_fields")
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name not in ("mix", "allow_dropped_fields")},
                   mix=data["mix"], allow_dropped_fields=None if allowed is None else tuple(allowed))

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``config``."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["fields"] = dict(self.fields)
        if self.allow_dropped_fields is None:  # written only when given: artifacts packed without it keep their bytes
            del data["allow_dropped_fields"]
        else:
            data["allow_dropped_fields"] = list(self.allow_dropped_fields)
        return data


@dataclass(frozen=True)
class InputPin:
    """One input as the manifest pins it: by content, never by location."""

    name: str
    kind: str
    size: int
    sha256: str
    records: int


@dataclass(frozen=True)
class FilePin:
    """A file of the artifact (seam table, rejects, card): its name, size and sha256; ``rows`` where it has rows."""

    name: str
    bytes: int
    sha256: str
    rows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "bytes": self.bytes, "sha256": self.sha256}
        return data if self.rows is None else dict(data, rows=self.rows)


@dataclass(frozen=True)
class ShardPin:
    """A shard as the manifest pins it (`packcli.artifact.shards.write_shard` returns it)."""

    name: str
    rows: int
    bytes: int
    sha256: str
    tokens: int
    supervised: int


@dataclass(frozen=True)
class TokenizerPin:
    """The tokenizer by content: its sha256 and its own BOS and EOS tokens."""

    sha256: str
    bos_token: str | None
    eos_token: str | None


@dataclass(frozen=True)
class TemplatePin:
    """The chat template: where it came from (`packcli.chat.templates`), which one, its text and sha256."""

    origin: str
    name: str | None
    sha256: str
    text: str


@dataclass(frozen=True)
class Manifest:
    """The contract manifest, typed: what `read_manifest`'s JSON holds, read through attributes.

    `to_dict` gives the JSON back key for key and value for value, so the hash (`manifest_hash`) and
    the written file are what they were as a dict. ``counts``, ``metrics`` and ``conventions`` stay
    mappings: their keys are the statuses, metrics and conventions they name (`packcli.contract`).
    ``dataset_card``, ``unhashed`` and ``manifest_sha256`` are None while pack is still building it.
    """

    loss_policy: str
    conventions: Mapping[str, Any]
    config: PackSettings
    inputs: tuple[InputPin, ...]
    counts: Mapping[str, Any]
    metrics: Mapping[str, Any]
    tokenizer: TokenizerPin
    template: TemplatePin
    shards: tuple[ShardPin, ...]
    seam_table: FilePin
    rejects: FilePin
    dataset_card: FilePin | None = None
    contract_version: int = CONTRACT_VERSION
    unhashed: Mapping[str, Any] | None = None
    manifest_sha256: str | None = None
    # The JSON it was read from (`of`), fields it does not know included: what verify hashes and lists, so a
    # forged field is judged as written (None for a manifest pack builds).
    data: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Manifest:
        """From a manifest's JSON whose shape is whole (verify's manifest check, `problems`).

        Raises:
            ContractError: a field is missing or not of its kind (`problems` names them all).
        """
        try:
            card = data.get("dataset_card")
            return cls(loss_policy=data["loss_policy"], conventions=data["conventions"],
                       config=PackSettings.of(data["config"]),
                       inputs=tuple(_pin(InputPin, entry) for entry in data["inputs"]), counts=data["counts"],
                       metrics=data["metrics"], tokenizer=_pin(TokenizerPin, data["tokenizer"]),
                       template=_pin(TemplatePin, data["template"]),
                       shards=tuple(_pin(ShardPin, entry) for entry in data["shards"]),
                       seam_table=_pin(FilePin, data["seam_table"]), rejects=_pin(FilePin, data["rejects"]),
                       dataset_card=None if card is None else _pin(FilePin, card),
                       contract_version=data["contract_version"], unhashed=data.get("unhashed"),
                       manifest_sha256=data.get("manifest_sha256"), data=data)
        except (KeyError, TypeError, AttributeError) as exc:
            found = problems(data)
            raise ContractError(f"{MANIFEST_NAME}: malformed: " + ("; ".join(found) if found else repr(exc)),
                                "run `packcli verify` on the artifact; re-pack it if the manifest was edited") from exc

    def to_dict(self) -> dict[str, Any]:
        """The manifest's JSON (`write_manifest` writes it, `manifest_hash` hashes it)."""
        data: dict[str, Any] = {
            "contract_version": self.contract_version, "loss_policy": self.loss_policy,
            "conventions": dict(self.conventions), "config": self.config.to_dict(),
            "inputs": [vars(i) for i in self.inputs], "counts": self.counts, "metrics": self.metrics,
            "tokenizer": vars(self.tokenizer), "template": vars(self.template),
            "shards": [vars(s) for s in self.shards], "seam_table": self.seam_table.to_dict(),
            "rejects": self.rejects.to_dict()}
        optional = {"dataset_card": None if self.dataset_card is None else self.dataset_card.to_dict(),
                    "unhashed": self.unhashed, "manifest_sha256": self.manifest_sha256}
        return dict(data, **{k: v for k, v in optional.items() if v is not None})

    @property
    def provenance(self) -> Mapping[str, Any]:
        """Where pack read the inputs, tokenizer and template (unhashed; empty when not recorded)."""
        return (self.unhashed or {}).get("provenance") or {}


def _pin(kind: type, data: Mapping[str, Any]) -> Any:
    """``kind`` from the fields of ``data`` it has (a field it does not know is verify's to report)."""
    return kind(**{f.name: data[f.name] for f in fields(kind) if f.name in data})


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


def finalize(manifest: Manifest, run_facts: dict | None = None) -> Manifest:
    """Add the unhashed run facts (creation time in UTC, host, argv, pid, library versions, and ``run_facts``)
    and the manifest hash."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = replace(manifest, contract_version=CONTRACT_VERSION,
                       unhashed={"created": created, "host": platform.node(), "argv": sys.argv[1:], "pid": os.getpid(),
                                 "versions": versions(), **(run_facts or {})})
    return replace(manifest, manifest_sha256=manifest_hash(manifest.to_dict()))


def write_manifest(manifest: Manifest | dict, directory: Path) -> Path:
    """Write ``manifest.json`` (a dict: a manifest as a forger re-seals it, `packcli.verify.forge`)."""
    data = manifest.to_dict() if isinstance(manifest, Manifest) else manifest
    path = directory / MANIFEST_NAME
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def problems(data: object) -> list[str]:
    """What keeps a manifest's JSON from being a `Manifest` every reader can trust: a section or field missing,
    a section that is not an object (or a list of them), a field not of its type or range
    (`packcli.artifact.fieldspec.FIELD_SPECS`, the table verify's manifest check judges by too). A field it
    does not know is no problem here: verify reports it (`packcli.verify.owners`)."""
    if not isinstance(data, Mapping):
        return ["the manifest is not a JSON object"]
    found: list[str] = []

    def need(kind: type, value: object, where: str, optional: tuple[str, ...] = ()) -> None:
        if not isinstance(value, Mapping):
            found.append(f"{where} is not an object")
            return
        found.extend(f"{where}.{f.name} is missing" for f in fields(kind)
                     if f.name not in value and f.name not in optional)

    need(Manifest, data, "manifest",
         optional=("dataset_card", "contract_version", "unhashed", "manifest_sha256", "data"))
    for name, kind, optional in (("config", PackSettings, ("allow_dropped_fields",)), ("tokenizer", TokenizerPin, ()),
                                 ("template", TemplatePin, ()), ("seam_table", FilePin, ("rows",)),
                                 ("rejects", FilePin, ("rows",)), ("dataset_card", FilePin, ("rows",))):
        if name in data:
            need(kind, data[name], name, optional)
    for name, kind in (("inputs", InputPin), ("shards", ShardPin)):
        entries = data.get(name, [])
        if not isinstance(entries, list):
            found.append(f"{name} is not a list")
            continue
        for k, entry in enumerate(entries):
            need(kind, entry, f"{name}[{k}]")
    for name in ("conventions", "counts", "metrics"):
        if name in data and not isinstance(data[name], Mapping):
            found.append(f"{name} is not an object")
    return found + value_problems(data)


def shard_pins(data: Mapping[str, Any]) -> tuple[ShardPin, ...]:
    """The shards a manifest of any contract with these shards lists (`packcli.contract.SHARD_CONTRACTS`: the
    readers of the packs alone, whose other fields differ between contracts).

    Raises:
        ContractError: a shard's field missing, or not of its type or range (`problems`, of the shards alone).
    """
    shards = {"shards": data.get("shards")}
    found = [p for p in problems(shards) if p.startswith("shards")]
    if found:
        raise ContractError(f"{MANIFEST_NAME}: malformed: " + "; ".join(found),
                            "run `packcli verify` on the artifact; re-pack it if the manifest was edited")
    return tuple(_pin(ShardPin, entry) for entry in shards["shards"])


def load_manifest(directory: str | Path) -> Manifest:
    """`read_manifest`, typed and judged: for the readers that trust a finished artifact's fields (stats, show),
    which then never meet a mistyped one later.

    Raises:
        InputError: no manifest. ContractError: unreadable, another contract, or malformed (`problems`).
    """
    data = read_manifest(directory)
    found = problems(data)
    if found:
        raise ContractError(f"{Path(directory) / MANIFEST_NAME}: malformed: " + "; ".join(found),
                            "run `packcli verify` on the artifact; re-pack it if the manifest was edited")
    return Manifest.of(data)


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
