"""`packcli.engine.make_engine`: the engine ``--engine`` names, its worker count checked, Ray imported only when
chosen."""

from __future__ import annotations

import pytest

from packcli.engine import make_engine
from packcli.engine.local import LocalEngine
from packcli.errors import PackcliError


def test_local_without_workers_lets_the_input_decide_and_with_them_takes_them():
    auto = make_engine("local")
    assert isinstance(auto, LocalEngine) and auto.auto and auto.workers >= 1
    given = make_engine("local", workers=3)
    assert isinstance(given, LocalEngine) and not given.auto and given.workers == 3


def test_an_unknown_engine_names_the_choices():
    with pytest.raises(PackcliError, match=r"`engine` must be one of local, ray, got 'spark'"):
        make_engine("spark")


def test_a_bad_worker_count_is_refused_before_any_process_starts():
    with pytest.raises(PackcliError, match=r"`workers` must be an integer from 1 to 1,024, got 0"):
        make_engine("local", workers=0)
