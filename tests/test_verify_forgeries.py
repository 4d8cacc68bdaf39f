"""Forgeries of the manifest's own rules (`packcli.verify.owners`' ``manifest`` check), and the forged copies'
baselines verifying clean.

Each forgery re-seals everything a forger could recompute (tests/forgery.py), so no hash can tell. The
forgeries each of the other checks must catch live in that check's file (tests/test_verify_<module>.py).
"""

from __future__ import annotations

import pytest
from conftest import seam_rows
from forgery import caught, edit_manifest

from packcli.verify import verify_artifact
from packcli.verify.forge import reseal


def test_the_copies_verify_before_any_forgery(packed, packed_drop):
    assert verify_artifact(packed).ok and verify_artifact(packed_drop).ok
    assert any(r["status"] == "dropped" for r in seam_rows(packed_drop))
    assert any(r["status"] == "truncated" for r in seam_rows(packed))


def test_conventions_say_labels_are_shifted(packed_copy):
    reseal(packed_copy, lambda m: m["conventions"].update(labels="shifted"))
    caught(packed_copy, "manifest", "conventions.labels = 'shifted'")


def test_config_loss_disagrees_with_loss_policy(packed_copy):
    reseal(packed_copy, lambda m: m["config"].update(loss="all"))
    caught(packed_copy, "manifest", "config.loss 'all' and loss_policy 'auto' disagree")


def test_an_unknown_hashed_field(packed_copy):
    reseal(packed_copy, lambda m: m.update(reviewed_by="nobody"))
    caught(packed_copy, "manifest", "hashed field reviewed_by")


@pytest.mark.parametrize(("edit", "field"), [
    (lambda m: m.pop("metrics"), "metrics"),
    (lambda m: m["config"].update(capacity="big"), "config.capacity"),
    (lambda m: m["shards"][0].pop("sha256"), "shards[0].sha256"),
    (lambda m: m.update(inputs={"name": "x"}), "inputs"),
], ids=["no-metrics", "capacity-a-string", "shard-without-sha256", "inputs-not-a-list"])
def test_a_malformed_manifest_is_named_not_a_traceback(edit, field, packed_copy):
    edit_manifest(packed_copy, edit)
    report = caught(packed_copy, "manifest", field)
    assert all(c["skipped"] for c in report["checks"] if c["name"] != "manifest")
