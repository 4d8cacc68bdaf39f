"""scripts/make_long_corpus.py: seeded, alternating roles, a long tail; without downloading anything."""

from __future__ import annotations

import json
import random

from conftest import load_script


def test_conversations_are_seeded_alternate_roles_and_have_a_tail(tmp_path, monkeypatch):
    make = load_script("make_long_corpus")
    source = [[f"d{d} t{t}" for t in range(2 + d % 5)] for d in range(50)]
    monkeypatch.setattr(make, "dialogues", lambda: source)
    monkeypatch.setattr(make, "TAIL_SHARE", 0.05)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert make.main(["--n", "400", "--out", str(a)]) == 0
    assert make.main(["--n", "400", "--out", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()
    records = [json.loads(line) for line in a.read_text().splitlines()]
    turns = []
    for record in records:
        roles = [m["role"] for m in record["messages"] if m["role"] != "system"]
        assert roles == ["user", "assistant"] * (len(roles) // 2) and roles
        turns.append(len(roles))
    assert max(turns) >= 2 * make.TAIL_MIN_DIALOGUES  # the long tail is there
    assert sorted(turns)[len(turns) // 2] < 20  # and most conversations are a dialogue or two


def test_poisson_has_the_mean_it_is_given():
    make = load_script("make_long_corpus")
    rng = random.Random(1)
    draws = [make._poisson(rng, 0.5) for _ in range(20_000)]
    assert abs(sum(draws) / len(draws) - 0.5) < 0.03
