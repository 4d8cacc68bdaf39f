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
