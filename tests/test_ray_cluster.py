"""A real three-node Ray cluster on this machine (scripts/ray_cluster_check.py): separate ``ray start``
processes, each node with its own raylet, object store and CPUs; ``pack --engine ray`` on it is
byte-identical to the local engine, and a worker node killed mid-run (its raylet, SIGKILL) either
costs nothing but time or fails the run clearly; every process the test starts is gone after it."""

from __future__ import annotations

import argparse

import pytest
from conftest import FIXTURES, load_script

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]


def test_three_nodes_pack_byte_identical_and_survive_a_killed_node(tmp_path):
    pytest.importorskip("ray")
    script = load_script("ray_cluster_check")
    args = argparse.Namespace(corpus=[str(FIXTURES / "corpus" / "openai.jsonl")], tokenizer=str(FIXTURES / "tokenizer"),
                              template=None, capacity=512, unit_lines=20, packs_per_shard=4, cpus_per_worker=1,
                              kill=True, workdir=str(tmp_path))
    results = script.check(args)
    assert [n["cpus"] for n in results["cluster"]["nodes"]] == [0, 1, 1]  # the head runs no task
    run = results["corpora"][0]
    assert run["ray_rc"] == 0, run["ray_stderr"]
    assert run["identical"] and run["manifest_ray"] == run["manifest_local"]
    kill = results["kill"]
    assert kill["killed"].get("node", "").startswith("worker-"), kill["killed"]
    assert kill["alive_nodes_after"] == 2  # the killed node is gone for good: its tasks ran elsewhere
    if kill["rc"] == 0:  # Ray re-ran the lost tasks on the live node
        assert kill["identical"], kill["stderr_tail"]
    else:  # or the run failed: one line, and no artifact
        assert kill["stderr_tail"].startswith("error:") and not kill["out_exists"], kill["stderr_tail"]
    assert results["leftovers_before_stop"] > 0  # the leftover check sees the cluster's processes...
    assert results["leftovers_after_stop"] == []  # ...and none is left
    assert script.verdict(results)[0]


def test_the_cluster_is_stopped_when_its_block_raises(tmp_path):
    """Cleanup on failure: an exception inside the cluster's block still stops every process it started."""
    pytest.importorskip("ray")
    script = load_script("ray_cluster_check")
    cluster = script.LocalCluster(workers=1)
    with pytest.raises(RuntimeError, match="planted"), cluster:
        assert cluster.alive_nodes() == 2 and cluster.leftovers()
        raise RuntimeError("planted")
    assert cluster.leftovers() == []
