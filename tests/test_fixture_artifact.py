"""The committed artifact still verifies with today's code and dependencies (run from the repo root)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, ROOT

from packcli.verify import verify_artifact


def test_fixture_artifact_verifies(monkeypatch):
    monkeypatch.chdir(ROOT)  # the manifest's sources are relative to the repository root
    report = verify_artifact("fixtures/packed")
    assert report.ok, [(c.name, [v.message for v in c.violations]) for c in report.checks if not c.ok]
    assert [c.name for c in report.checks] == ["manifest", "integrity", "contract_drift", "pack_layout", "global",
                                            "copies", "reconstruction", "plan"]


@pytest.mark.torch
def test_fixture_artifact_attention_cpu(monkeypatch):
    pytest.importorskip("torch")
    from packcli.verify.suite import attention_check

    monkeypatch.chdir(ROOT)
    report = attention_check(FIXTURES / "packed", ["sdpa", "hf:sdpa", "naive"], packs=1)
    by_name = {r.backend: r for r in report.results}
    assert by_name["sdpa"].ok and by_name["hf:sdpa"].ok
    assert not by_name["naive"].ok, "the negative control must leak"
