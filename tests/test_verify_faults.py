"""`packcli.verify.faults`: ``verify --self-test``'s negative controls each damage a copy and are caught by
the check that owns what they damage."""

from __future__ import annotations

import pytest

from packcli.verify import verify_artifact
from packcli.verify.faults import FAULTS, prepare_workspace, run_self_test

# every plan check below runs file-backed too (tests/conftest.py): the same report, over files
pytestmark = pytest.mark.usefixtures("plan_file_backed_too")


def test_the_self_tests_overlong_fault_on_a_drop_artifact(packed_drop, tmp_path):
    """--self-test's overlong-policy fault takes the drop branch on a --overlong drop artifact."""
    from packcli.verify.faults import FAULTS, prepare_workspace

    fault = next(f for f in FAULTS if f.name == "overlong-policy")
    copy = prepare_workspace(packed_drop, tmp_path)
    fault.apply(copy, tmp_path)
    assert any("it must be dropped" in v.message for c in verify_artifact(copy).checks if c.name == "plan"
               for v in c.violations)


def test_a_fault_with_nothing_to_damage_says_so(corpus_files, tokenizer_dir, tmp_path):
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus
    from packcli.verify.faults import FAULTS, NotApplicable, prepare_workspace

    out = tmp_path / "roomy"
    pack_corpus(PackConfig(inputs=tuple(corpus_files[:1]), tokenizer=str(tokenizer_dir), out=out, capacity=4096))
    fault = next(f for f in FAULTS if f.name == "overlong-policy")
    with pytest.raises(NotApplicable, match="no truncated example|no dropped example"):
        fault.apply(prepare_workspace(out, tmp_path / "ws"), tmp_path / "ws")


HASH_SEALED = {"byte-flip", "manifest-edited", "card-edited"}  # faults that do not re-seal the manifest


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_fault_is_caught_by_its_check(fault, packed, tmp_path):
    copy = prepare_workspace(packed, tmp_path)
    assert verify_artifact(copy).ok, "the workspace copy must pass before the fault"
    kwargs = fault.apply(copy, tmp_path)
    report = verify_artifact(copy, **kwargs)
    checks = {c.name: c for c in report.checks}
    assert not report.ok
    assert any(fault.expect in v.message for v in checks[fault.check].violations), checks[fault.check]
    if fault.name not in HASH_SEALED and fault.check not in ("contract_drift", "integrity"):
        # A consistent forgery: hashes match, so only the semantic check stands between it and training.
        assert checks["integrity"].ok, checks["integrity"].violations


def test_self_test_runs_all_faults(packed, tmp_path):
    results = run_self_test(packed, tmp_path)
    assert [r.name for r in results] == ["clean-copy"] + [f.name for f in FAULTS]
    assert all(r.caught for r in results), [r for r in results if not r.caught]
