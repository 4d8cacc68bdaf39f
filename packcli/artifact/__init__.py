"""What a packcli artifact is on disk, and the one place that reads and writes it (docs/contract.md).

    shards.py    the shard schema, the writer, and the flat reader the loader and verify share
    seams.py     the seam table (one row per input record) and rejects.jsonl
    manifest.py  the hashed contract manifest: canonical JSON, hash, read with a version check; typed
                 (`Manifest`, with the run's `PackSettings` as its ``config``), read through attributes
    fieldspec.py what a valid manifest field is (types, range, required): the one table every reader and
                 verify judge a manifest by, and pack bounds its settings with
"""
