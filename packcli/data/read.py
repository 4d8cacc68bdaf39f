"""Reading packs from an artifact, one Parquet row group at a time.

Stands on ``packcli.artifact`` alone (never on the verifier): the manifest is read with its contract
check, a folder holding anything its manifest does not list is refused (`packcli.artifact.listing`),
each shard's sha256 is checked the first time this process reads it (``check_hashes=False`` skips
it), and only one row group is decoded at a time, so memory follows the row-group size, not
the artifact's. The trade-off: a shard is hashed whole before its first row group is used, which
reads it twice; that is the price of never training on a byte the manifest did not pin.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.contract import IGNORE_INDEX, SHARD_CONTRACTS


@dataclass(frozen=True)
class Pack:
    """One packed row as numpy arrays (the layout: docs/contract.md)."""

    input_ids: npt.NDArray[np.int32]
    labels: npt.NDArray[np.int32]
    position_ids: npt.NDArray[np.int32]
    cu_seqlens: npt.NDArray[np.int32]
    example_ids: npt.NDArray[np.int64]
    seq_lengths: npt.NDArray[np.int32] | None = None

    def __post_init__(self) -> None:
        if self.seq_lengths is None:
            object.__setattr__(self, "seq_lengths", np.diff(self.cu_seqlens).astype(np.int32))

    @property
    def num_supervised(self) -> int:
        """Labels that carry loss: with labels unshifted and every first label -100, the loss terms."""
        return int(np.count_nonzero(self.labels != IGNORE_INDEX))


@dataclass(frozen=True)
class RowGroup:
    """Where a block of packs lives: shard ``shard`` (manifest order), row group ``index``, ``rows`` packs."""

    shard: int
    index: int
    rows: int


class PackReader:
    """An artifact's packs, addressed by row group.

    Args:
        directory: the artifact (``--out`` of ``packcli pack``).
        check_hashes: compare each shard's sha256 with the manifest before its first row group is read.

    Raises:
        PackcliError: not an artifact, a contract this packcli does not read, a shard the manifest pins with
            a field missing or mistyped (`packcli.artifact.manifest.shard_pins`), a folder holding what its
            manifest does not list, an unreadable shard.
    """

    def __init__(self, directory: str | Path, *, check_hashes: bool = True) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from packcli.artifact import manifest as mf
        from packcli.artifact.listing import describe_stranger, listed_names, strangers
        from packcli.errors import ContractError

        self.directory = Path(directory)
        self.manifest = mf.read_manifest(self.directory, contracts=SHARD_CONTRACTS)  # the packs are the same
        found = strangers(self.directory, self.manifest)
        if found:  # what else a folder holds can change what another reader of it trains on: refuse, as verify does
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise ContractError(f"{self.directory}: not the artifact its manifest lists: "
                                f"{describe_stranger(*found[0], found[0][0] in listed_names(self.manifest))}{more}",
                                "remove what packcli did not write (`packcli verify` lists every such entry)")
        self.check_hashes = check_hashes
        self.pins = mf.shard_pins(self.manifest)
        self.shards = [pin.name for pin in self.pins]
        self._verified: set[str] = set()
        groups = []
        for s, pin in enumerate(self.pins):
            try:
                meta = pq.read_metadata(self.directory / pin.name)
            except (pa.ArrowException, OSError) as exc:
                raise ContractError(f"{self.directory / pin.name}: unreadable ({exc})",
                                    "re-copy the artifact, or run `packcli verify` on it") from exc
            groups += [RowGroup(s, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
        self.row_groups = groups

    @property
    def artifact_id(self) -> str:
        """The manifest hash: what a loader's state dict is tied to."""
        return str(self.manifest["manifest_sha256"])

    @property
    def num_packs(self) -> int:
        return sum(g.rows for g in self.row_groups)

    def read(self, group: RowGroup) -> list[Pack]:
        """The packs of one row group, in row order (the shard's hash checked first, once per process)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from packcli.artifact.shards import SCHEMA, load_flat
        from packcli.errors import ContractError

        name = self.shards[group.shard]
        path = self.directory / name
        self._check(name, path)
        # Arrow's allocator keeps the pages of the row groups let go for reuse, and its reuse is not exact:
        # without this a pass over the artifact grew by about 15 MiB a row group (docs/benchmarks-pipeline.md)
        pa.default_memory_pool().release_unused()
        with pq.ParquetFile(path) as handle:
            table = handle.read_row_group(group.index)
        if not table.schema.equals(SCHEMA):
            raise ContractError(f"{path}: columns differ from contract {self.manifest['contract_version']}",
                                "rebuild the artifact with this packcli (`packcli verify` says what differs)")
        flat = load_flat(table, name)
        packs = []
        for r in range(flat.rows):
            a, b = flat.row_offsets[r], flat.row_offsets[r + 1]
            packs.append(Pack(flat.ids[a:b], flat.labels[a:b], flat.positions[a:b], flat.cu[r], flat.example_ids[r],
                              flat.seq_lengths[r]))
        return packs

    def _check(self, name: str, path: Path) -> None:
        if not self.check_hashes or name in self._verified:
            return
        from packcli.contract import file_sha256
        from packcli.errors import ContractError

        expected = self.pins[self.shards.index(name)].sha256
        if not path.is_file() or file_sha256(path) != expected:
            raise ContractError(f"{path}: sha256 differs from the manifest (corrupted, modified or missing)",
                                "re-copy the artifact, or run `packcli verify` on it; check_hashes=False skips this")
        self._verified.add(name)

    def __iter__(self) -> Iterator[Pack]:
        for group in self.row_groups:
            yield from self.read(group)


def iter_packs(directory: str | Path, *, check_hashes: bool = True) -> Iterator[Pack]:
    """Yield every pack of an artifact in stored order (shards in manifest order), one row group in memory."""
    yield from PackReader(directory, check_hashes=check_hashes)
