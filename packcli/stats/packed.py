"""``packcli stats DIR``: what a packed artifact holds, from its manifest and its shards' per-pack counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.artifact.manifest import Manifest
from packcli.contract import IN_PACKS
from packcli.stats.inputs import Quantiles


@dataclass(frozen=True)
class ArtifactStats:
    """``packcli stats DIR``: what a packed artifact holds, from its manifest and shards."""

    directory: str
    identity: dict
    counts: dict
    metrics: dict
    shards: list[dict]
    inputs: list[dict]  # per input: source, kind, records read, its mixture weight, and its counts by status
    fill: npt.NDArray[np.float64] = field(repr=False, compare=False)
    supervised_fill: npt.NDArray[np.float64] = field(repr=False, compare=False)
    lengths: npt.NDArray[np.int64] = field(repr=False, compare=False)

    def to_dict(self) -> dict:
        data = asdict(self)
        for key in ("fill", "supervised_fill", "lengths"):
            data.pop(key)
        data["fill_quantiles"] = Quantiles.of(self.fill).values
        data["supervised_fill_quantiles"] = Quantiles.of(self.supervised_fill).values
        return data


def artifact_stats(directory: str | Path) -> ArtifactStats:
    """Read the manifest and the per-pack counts (not the tokens) of every shard."""
    import pyarrow.compute as pc

    from packcli.artifact import manifest as mf
    from packcli.artifact.shards import read_parquet

    directory = Path(directory)
    manifest = mf.load_manifest(directory)
    capacity = manifest.config.capacity
    fills, sup_fills, shards = [], [], []
    for info in manifest.shards:
        table = read_parquet(directory / info.name, columns=["num_tokens", "num_supervised", "cu_seqlens"])
        tokens = table["num_tokens"].to_numpy()
        fills.append(tokens / capacity)
        sup_fills.append(table["num_supervised"].to_numpy() / capacity)
        shards.append({"name": info.name, "packs": len(table), "tokens": int(tokens.sum()),
                       "supervised": int(pc.sum(table["num_supervised"]).as_py() or 0),
                       "examples": int(pc.sum(pc.subtract(pc.list_value_length(table["cu_seqlens"]), 1)).as_py() or 0),
                       "density": float(tokens.sum() / (len(table) * capacity)) if len(table) else 0.0,
                       "bytes": info.bytes})
    lengths = _packed_lengths(directory / manifest.seam_table.name)
    identity = {"manifest_sha256": manifest.manifest_sha256, "contract_version": manifest.contract_version,
                "tokenizer_sha256": manifest.tokenizer.sha256, "template_sha256": manifest.template.sha256,
                "template_origin": manifest.template.origin, "loss_policy": manifest.loss_policy,
                "config": manifest.config.to_dict(), "versions": manifest.unhashed.get("versions", {})}
    return ArtifactStats(str(directory), identity, manifest.counts, manifest.metrics, shards, input_counts(manifest),
                         fill=np.concatenate(fills) if fills else np.zeros(0),
                         supervised_fill=np.concatenate(sup_fills) if sup_fills else np.zeros(0), lengths=lengths)


def _packed_lengths(path: Path) -> npt.NDArray[np.int64]:
    """The length of every seam-table row in a pack, read a batch at a time: the table's string columns
    are never all in memory, only one number a packed example."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    wanted = pa.array(list(IN_PACKS))
    parts = []
    with pq.ParquetFile(path) as handle:
        for batch in handle.iter_batches(columns=["length", "status"]):
            in_packs = pc.is_in(batch.column("status"), wanted)
            parts.append(np.asarray(batch.column("length").filter(in_packs)).astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def input_counts(manifest: Manifest) -> list[dict]:
    """Per input of an artifact: where it came from, what its mixture asked of it, what became of its records."""
    from packcli.mix import Mixture, describe

    mix = manifest.config.mix
    weight = {}
    if mix is not None:
        mixture = Mixture.from_manifest(mix)
        weight = {i: describe(mixture.by, s.weight) for s in mixture.sources for i in s.inputs}
    by_input = manifest.counts.get("by_input") or [{} for _ in manifest.inputs]
    return [{"source": pinned.name, "kind": pinned.kind, "records": pinned.records, "weight": weight.get(i),
             **counts} for i, (pinned, counts) in enumerate(zip(manifest.inputs, by_input))]
