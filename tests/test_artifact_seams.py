"""`packcli.artifact.seams`: the seam table written a row group at a time is the table written at once."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq


def test_the_seam_table_written_group_by_group_is_the_table_written_at_once(packed, tmp_path, monkeypatch):
    """write_seam_table converts its columns one row group at a time (the driver never holds the corpus's whole
    table as Arrow); with groups as pq.write_table cuts them, the bytes are the same, nulls and codes included."""
    import pyarrow as pa

    from packcli.artifact import seams

    table = pq.read_table(packed / "examples.parquet")
    assert table["shard"].null_count and table.num_rows > 7  # rows in no pack: nulls to carry over
    rows = table.to_pydict()
    shards = sorted({s for s in rows["shard"] if s is not None})
    columns = {**rows,
               "status": seams.Codes([sorted(set(rows["status"])).index(s) for s in rows["status"]],
                                     sorted(set(rows["status"]))),
               "shard": seams.Codes([shards.index(s) if s else 0 for s in rows["shard"]], shards,
                                    null=np.array([s is None for s in rows["shard"]])),
               "token_hash": seams.FixedWidth(np.array([h.encode() for h in rows["token_hash"]], dtype="S16")),
               "format": seams.EmptyAsNull([f or "" for f in rows["format"]])}
    monkeypatch.setattr(seams, "ROW_GROUP", 7)
    seams.write_seam_table(tmp_path / "groups.parquet", columns)
    pq.write_table(pa.Table.from_pydict(rows, schema=seams.SEAM_TABLE_SCHEMA), tmp_path / "once.parquet",
                   compression="zstd", write_statistics=False, row_group_size=7)
    assert (tmp_path / "groups.parquet").read_bytes() == (tmp_path / "once.parquet").read_bytes()
    assert pq.ParquetFile(tmp_path / "groups.parquet").metadata.num_row_groups == -(-table.num_rows // 7)
