"""`packcli.verify.request`: a verify run's choices checked at once by parameter, and run as one call."""

from __future__ import annotations

from pathlib import Path

import pytest

from packcli.errors import PackcliError
from packcli.verify.request import VerifyRequest, run_request


def test_every_bad_choice_is_named_by_its_parameter_before_any_work(tmp_path: Path) -> None:
    request = VerifyRequest(tmp_path / "missing", packs=0, sample=3, attention=(), max_violations=-1,
                            seam_out=str(tmp_path / "seams.txt"))
    problems = request.problems()
    for name in ("`directory`", "`packs`", "`sample` picks", "`attention` names no backend", "`max_violations`",
                 "`seam_out`"):
        assert any(name in p for p in problems), (name, problems)
    assert not any("--" in p for p in problems)
    with pytest.raises(PackcliError) as caught:
        run_request(request)
    assert "`packs`" in caught.value.message and not (tmp_path / "seams.txt").exists()


def test_the_self_test_takes_no_other_check(tmp_path: Path) -> None:
    problems = VerifyRequest(Path("fixtures/packed"), self_test=True, seam_out=str(tmp_path / "s.csv")).problems()
    assert problems == ["`self_test` runs its own checks, here; leave out `attention`, `render_oracle`, `seam_out` "
                        "and `engine`"]


def test_a_run_gives_the_report_and_writes_the_seam_table_asked_for(tmp_path: Path) -> None:
    seams = tmp_path / "seams.csv"
    outcome = run_request(VerifyRequest(Path("fixtures/packed"), seam_out=str(seams), consumers=("packcli",)))
    assert outcome.ok and outcome.report.ok and outcome.attention is None and outcome.self_test is None
    assert [c.ok for c in outcome.consumers] == [True]
    assert seams.read_text().count("\n") > 1


def test_a_failed_consumer_or_report_is_no_ok_outcome() -> None:
    from packcli.verify.report import VerifyReport
    from packcli.verify.request import VerifyOutcome

    report = VerifyReport("x")
    failing = type("Failing", (), {"ok": False})()
    assert VerifyOutcome(report).ok and not VerifyOutcome(report, consumers=[failing]).ok
    assert not VerifyOutcome(report, attention=failing).ok
    assert not VerifyOutcome(None).ok
    assert not VerifyOutcome(self_test=[type("R", (), {"caught": False, "applies": True})()]).ok
