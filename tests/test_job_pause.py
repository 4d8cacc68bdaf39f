"""`packcli.job.pause`: a run held at a named point, once, by the first process to arrive, until the test lets it go;
without the variables nothing holds."""

from __future__ import annotations

import os
import threading
import time

from packcli.job.pause import pause_at


def held(point: str) -> threading.Thread:
    thread = threading.Thread(target=pause_at, args=(point,), daemon=True)
    thread.start()
    return thread


def test_without_the_variables_no_point_holds(monkeypatch, tmp_path):
    monkeypatch.delenv("PACKCLI_PAUSE_AT", raising=False)
    pause_at("unit")  # returns: nothing asked for it
    monkeypatch.setenv("PACKCLI_PAUSE_AT", "rename")
    monkeypatch.setenv("PACKCLI_PAUSE_DIR", str(tmp_path))
    pause_at("unit")  # another point was asked for
    assert list(tmp_path.iterdir()) == []


def test_a_point_holds_once_with_the_pid_until_its_marker_is_removed(monkeypatch, tmp_path):
    monkeypatch.setenv("PACKCLI_PAUSE_AT", "shard,unit-00002")
    monkeypatch.setenv("PACKCLI_PAUSE_DIR", str(tmp_path))
    thread = held("shard")
    marker = tmp_path / "shard"
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the point never held"
        time.sleep(0.01)
    assert marker.read_text() == str(os.getpid()) and thread.is_alive()  # holding, and says who holds
    marker.unlink()
    thread.join(30)
    assert not thread.is_alive()
    pause_at("shard")  # claimed: a point holds once a run
    pause_at("unit", detail="unit-00001")  # another unit than the one asked for
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard.claimed"]
