"""`packcli.config.PackConfig`: a pack run's options, every problem found at once before any work, each named
by its parameter; the settings it pins (the manifest's ``config``)."""

from __future__ import annotations

import pytest

from packcli.config import PackConfig
from packcli.errors import InputError, PackcliError


def test_invalid_config_reports_every_problem():
    with pytest.raises(Exception, match="capacity.*strategy"):
        PackConfig(inputs=("x",), tokenizer="t", out="o", capacity=0, strategy="magic")


def config(**changes) -> PackConfig:
    return PackConfig(**{"inputs": ("x.jsonl",), "tokenizer": "t", "out": "o", **changes})


@pytest.mark.parametrize(("changes", "said"), [
    ({"inputs": ()}, "no input files given"),
    ({"tokenizer": ""}, "no tokenizer given (`tokenizer`)"),
    ({"overlong": "truncate", "split_overlap": 8}, "`split_overlap` and `split_min_last` need `overlong='split'`"),
    ({"overlong": "split", "capacity": 64, "split_overlap": 40}, "`split_overlap` must be from 0 to half the capacity"),
    ({"capacity": 1 << 20, "packs_per_shard": 4096}, "do not fit one shard (at most 2,147,483,647)"),
    ({"template_date": "26/07/2024"}, "`template_date` must be a date as YYYY-MM-DD, got '26/07/2024'"),
    ({"allow_dropped_fields": ("colour",)}, "`allow_dropped_fields` must name tool_calls, got ('colour',)"),
    ({"mix": "a.jsonl=0.5,b.jsonl=2x"}, "`mix`: proportions (0.7) and repeats (3x) cannot be mixed"),
])
def test_each_bad_option_is_named_by_its_parameter(changes, said):
    with pytest.raises(PackcliError, match="^invalid configuration: ") as caught:
        config(**changes)
    assert said in str(caught.value)


def test_plain_strings_become_choices_and_the_settings_resolve_the_window():
    settings = config(strategy="window", loss="all", allow_dropped_fields=("tool_calls",)).settings()
    assert settings.strategy == "window" and settings.loss == "all" and settings.window is not None
    assert settings.allow_dropped_fields == ("tool_calls",)
    assert config(strategy="bfd").settings().window is None  # only the window strategy has one
    assert config().settings().allow_dropped_fields is None  # not given: the manifest gets no key


def test_every_missing_path_is_named_at_once(tmp_path):
    with pytest.raises(InputError) as caught:
        config(inputs=(str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")), tokenizer=str(tmp_path / "tok"),
               out=tmp_path / "o").check_files()
    said = str(caught.value)
    assert all(name in said for name in ("a.jsonl", "b.jsonl", "tok")), said
