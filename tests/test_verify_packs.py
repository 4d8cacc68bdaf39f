"""`packcli.verify.packs`: the packs as verify keeps them, each shard read once, checked, reduced and let go."""

from __future__ import annotations

from packcli.verify import verify_artifact


def test_verify_holds_one_shard_at_a_time(packed, monkeypatch):
    """Each shard is read, checked and reduced to its segments' digests before the next is read, so verify's
    memory follows the examples, not the tokens; a clean artifact reads no shard a second time."""
    import weakref

    from packcli.artifact.manifest import read_manifest
    from packcli.verify import integrity, packs

    live, loads, most = [], [], [0]

    def counting(real):
        def load(table, name):
            flat = real(table, name)
            live.append(weakref.ref(flat))
            loads.append(name)
            most[0] = max(most[0], sum(ref() is not None for ref in live))
            return flat
        return load

    monkeypatch.setattr(integrity, "load_flat", counting(integrity.load_flat))
    monkeypatch.setattr(packs, "load_flat", counting(packs.load_flat))
    assert verify_artifact(packed, render_oracle=None).ok
    shards = [info["name"] for info in read_manifest(packed)["shards"]]
    assert len(shards) >= 3 and loads == shards and most[0] == 1


def _index(directory, scratch):
    """The fixture's shards indexed into ``scratch``'s columns, as integrity indexes them."""
    from packcli.artifact.manifest import read_manifest
    from packcli.artifact.shards import load_flat, read_shard
    from packcli.verify.packs import PackIndex

    index = PackIndex(directory, scratch)
    for info in read_manifest(directory)["shards"]:
        index.add(load_flat(read_shard(directory / info["name"]), info["name"]))
    return index


def test_segments_in_files_are_the_segments_in_memory(packed, tmp_path, monkeypatch):
    """With a folder the segments are appended to files shard by shard and mapped back: the same columns, every
    field, as in memory; and the arrays are views of mappings, not anonymous memory."""
    import mmap

    monkeypatch.setattr(mmap, "PAGESIZE", 1)  # the fixture's columns are smaller than a page: map them anyway

    import numpy as np

    from packcli.job.scratch import IN_MEMORY, Scratch
    from packcli.verify.packs import FIELDS

    here, mapped = _index(packed, IN_MEMORY).columns, _index(packed, Scratch(tmp_path)).columns
    for name in (*FIELDS, "order", "sorted_ids"):
        assert np.array_equal(getattr(mapped, name), getattr(here, name)), name
    assert isinstance(mapped.example_id.base.obj, mmap.mmap) and here.example_id.base is None


def test_a_shard_added_after_the_columns_are_built_is_refused(packed, tmp_path):
    """The columns are built once from the appended parts (which are then let go): a shard added later would be
    missing from them, so it is refused, not dropped."""
    import pytest

    from packcli.artifact.shards import load_flat, read_shard
    from packcli.job.scratch import Scratch

    index = _index(packed, Scratch(tmp_path))
    assert len(index.columns.example_id)
    name = index.shards[0]
    with pytest.raises(RuntimeError, match="added after the columns were built"):
        index.add(load_flat(read_shard(packed / name), name))
