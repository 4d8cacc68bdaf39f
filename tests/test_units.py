"""Units of work: splitting at line boundaries changes nothing; finished units are reused on resume."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.artifact import manifest as mf
from packcli.config import PackConfig
from packcli.ingest import describe_input, read_lines
from packcli.job.run import pack_corpus
from packcli.job.units import iter_unit_lines, plan_units
from packcli.prepare import Preparer


def test_units_cover_every_line_once(tmp_path):
    path = tmp_path / "a.jsonl"
    lines = [b'{"text": "line %d"}' % i if i % 5 else b"" for i in range(1, 104)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    specs = plan_units([describe_input(path)], 10)
    assert len(specs) == 11 and [s.span.first for s in specs] == list(range(1, 104, 10))
    got = [item for s in specs for item in iter_unit_lines(s)]
    assert got == list(read_lines(path, 0))


def _line_starts_reference(data: bytes, every: int, max_bytes: int) -> list[tuple[int, int]]:
    """The rule, one line at a time: a span starts at line 1, then ``every`` lines after the previous start
    or at the first line starting ``max_bytes`` or more after it."""
    starts, line, start = [(1, 0)], 1, 0
    offset = 0
    for number, raw in enumerate(data.splitlines(keepends=True), start=2):
        offset += len(raw)
        if not raw.endswith(b"\n") or offset >= len(data):
            break
        if number == line + every or offset >= start + max_bytes:
            line, start = number, offset
            starts.append((line, start))
    return starts


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(0, 60), max_size=80), tail=st.booleans(), every=st.integers(1, 12),
       max_bytes=st.integers(1, 200))
def test_spans_end_after_so_many_lines_or_bytes(tmp_path_factory, lengths, tail, every, max_bytes):
    from packcli.ingest.jsonl import _line_starts

    data = b"".join(b"x" * n + b"\n" for n in lengths) + (b"end" if tail else b"")
    path = tmp_path_factory.mktemp("spans") / "a.jsonl"
    path.write_bytes(data)
    assert _line_starts(path, every, max_bytes) == _line_starts_reference(data, every, max_bytes)


def test_long_lines_make_more_units(tmp_path, monkeypatch):
    """A file of long lines is cut by bytes as well as by lines, and every line is still read once."""
    from packcli.ingest import jsonl

    path = tmp_path / "long.jsonl"
    path.write_bytes(b"".join(b'{"text": "%s"}\n' % (b"w " * 500) for _ in range(40)))  # 1,013 bytes a line
    assert len(plan_units([describe_input(path)], 100)) == 1
    monkeypatch.setattr(jsonl, "UNIT_BYTES", 4096)
    specs = plan_units([describe_input(path)], 100)
    # line 5 starts at byte 4,052, line 6 at 5,065: the first start past 4,096 bytes
    assert len(specs) == 8 and [s.span.first for s in specs] == list(range(1, 41, 5))
    assert [item for s in specs for item in iter_unit_lines(s)] == list(read_lines(path, 0))


def test_compressed_file_is_one_unit(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "x"}\n' * 50))
    specs = plan_units([describe_input(path)], 10)
    assert len(specs) == 1 and len(list(iter_unit_lines(specs[0]))) == 50


@pytest.mark.parametrize("unit_lines", [1, 7, 64])
def test_unit_size_does_not_change_the_artifact(tmp_path, corpus_files, tokenizer_dir, unit_lines):
    def run(out, n):
        return pack_corpus(PackConfig(inputs=tuple(corpus_files), tokenizer=str(tokenizer_dir), out=tmp_path / out,
                                      capacity=512, lines_per_unit=n))
    a, b = run("a", 100_000), run("b", unit_lines)
    assert a.manifest["manifest_sha256"] == b.manifest["manifest_sha256"]
    for info in a.manifest["shards"]:
        assert (tmp_path / "a" / info["name"]).read_bytes() == (tmp_path / "b" / info["name"]).read_bytes()


def test_resume_reuses_finished_units(tmp_path, corpus_files, tokenizer_dir, monkeypatch):
    import packcli.job.run as pipeline

    cfg = PackConfig(inputs=tuple(corpus_files), tokenizer=str(tokenizer_dir), out=tmp_path / "o", capacity=512,
                     lines_per_unit=25)
    monkeypatch.setattr(pipeline, "apply_overlong", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        pack_corpus(cfg)
    monkeypatch.undo()
    work = tmp_path / ".packcli-work-o"
    sidecars = sorted(work.glob("unit-*.json"))
    assert len(sidecars) == len(plan_units([describe_input(Path(p)) for p in corpus_files], 25))
    sidecars[2].unlink()  # lose one unit: only it is redone
    calls = []
    real = Preparer.prepare
    monkeypatch.setattr(Preparer, "prepare", lambda self, batch, **kw: calls.append(len(batch)) or real(self, batch, **kw))
    summary = pack_corpus(cfg)
    assert sum(calls) <= 25 and calls, "only the lost unit is tokenized again"
    assert not work.exists()
    fresh = pack_corpus(PackConfig(inputs=tuple(corpus_files), tokenizer=str(tokenizer_dir), out=tmp_path / "f",
                                   capacity=512, lines_per_unit=25))
    assert fresh.manifest["manifest_sha256"] == summary.manifest["manifest_sha256"]
    assert mf.read_manifest(tmp_path / "o")["manifest_sha256"] == summary.manifest["manifest_sha256"]


def test_local_worker_processes_give_the_same_bytes(tmp_path, corpus_files, tokenizer_dir):
    from conftest import artifact_bytes

    from packcli.engine.local import LocalEngine

    def run(out: str, workers: int):
        return pack_corpus(PackConfig(inputs=tuple(corpus_files), tokenizer=str(tokenizer_dir), out=tmp_path / out,
                                      capacity=512, lines_per_unit=30, packs_per_shard=4),
                           engine=LocalEngine(workers=workers))

    one, two = run("one", 1), run("two", 2)
    assert len(two.manifest["shards"]) > 2  # shards written by the pool too
    assert one.manifest["manifest_sha256"] == two.manifest["manifest_sha256"]
    assert artifact_bytes(tmp_path / "one", one.manifest) == artifact_bytes(tmp_path / "two", two.manifest)
    assert two.manifest["unhashed"]["tokenization"] == one.manifest["unhashed"]["tokenization"]  # guard counts too


def test_local_worker_processes_surface_a_bad_record(tmp_path, tokenizer_dir):
    from conftest import FIXTURES

    from packcli.engine.local import LocalEngine
    from packcli.errors import PackcliError, RecordError

    broken = FIXTURES / "corpus" / "broken.jsonl"
    with pytest.raises(RecordError, match="broken.jsonl:3"):
        pack_corpus(PackConfig(inputs=(str(broken),), tokenizer=str(tokenizer_dir), out=tmp_path / "o",
                               lines_per_unit=5, on_error="fail"), engine=LocalEngine(workers=2))
    assert not (tmp_path / "o").exists()
    with pytest.raises(PackcliError, match="`workers` must be an integer from 1 to 1,024, got 0"):
        LocalEngine(workers=0)


def _whoami(delay: float, item: int) -> tuple[int, int]:
    import os
    import time

    time.sleep(delay)
    return item, os.getpid()


def _fail_some(common: None, item: int) -> int:
    import time

    if item == 0:
        time.sleep(1.0)  # in the worker: fails after item 1 has failed here
        raise ValueError("item 0")
    if item == 1:
        raise ValueError("item 1")
    return item


def test_shared_pool_runs_every_item_once_here_and_in_workers_and_keeps_them():
    import os

    from packcli.engine.pool import SharedPool

    done: list[int] = []
    with SharedPool(3) as pool:
        out = pool.map(_whoami, 0.05, list(range(12)), on_done=lambda item, result: done.append(item))
        again = pool.map(_whoami, 0.05, list(range(12)))
    assert [item for item, _ in out] == list(range(12)) and sorted(done) == list(range(12))
    pids = {pid for _, pid in out}
    assert os.getpid() in pids and len(pids) >= 2  # this process took items, and so did a worker
    assert {pid for _, pid in again} - {os.getpid()} <= pids  # the second map: the same workers


def test_shared_pool_raises_the_first_failing_item_in_order():
    """Item 1 fails here first in time; item 0, taken earlier by a worker, fails later: item 0 is raised."""
    from packcli.engine.pool import SharedPool

    with SharedPool(2) as pool, pytest.raises(ValueError, match="item 0"):
        pool.map(_fail_some, None, list(range(6)))


def test_default_workers_is_bounded_by_cpus_and_memory(monkeypatch):
    import os

    from packcli.engine import pool as workers

    assert 1 <= workers.default_workers() <= len(os.sched_getaffinity(0))
    monkeypatch.setattr(workers, "WORKER_MEMORY", 1 << 50)  # more than any machine has: one process
    assert workers.default_workers() == 1


def _die_in_a_worker(driver_pid: int, item: int) -> int:
    import os

    if os.getpid() != driver_pid:
        os._exit(3)  # what the OOM killer does to a worker
    return item


def test_a_worker_that_dies_is_a_clear_error_not_a_traceback():
    import os

    from packcli.engine.pool import SharedPool
    from packcli.errors import PackcliError

    with SharedPool(2) as pool, pytest.raises(PackcliError, match="worker process died") as info:
        pool.map(_die_in_a_worker, os.getpid(), list(range(4)))
    assert "fewer `workers`" in info.value.hint


def test_workers_leave_when_the_driver_is_killed(tmp_path):
    """SIGKILL runs no shutdown code: the workers must notice on their own that their parent is gone
    (before, each stayed for good, blocked on its task queue, with its memory)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import os, sys, time\n"
        "from packcli.engine.pool import SharedPool\n"
        "pool = SharedPool(3)\n"
        "pids = {pool._pool.submit(os.getpid).result() for _ in range(20)}\n"
        "print(*sorted(pids), flush=True)\n"
        "time.sleep(60)\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    workers = [int(pid) for pid in driver.stdout.readline().split()]
    assert workers and driver.pid not in workers
    driver.send_signal(signal.SIGKILL)
    driver.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.time() + 10
    while time.time() < deadline and any(map(alive, workers)):
        time.sleep(0.1)
    assert not any(map(alive, workers))


def test_auto_workers_follow_the_size_of_the_input():
    """Without --workers: one process per unit and per MIN_BYTES_PER_PROCESS of input, at most the ceiling.
    With --workers N: N, but never more processes than units (a process without a unit only starts up)."""
    from packcli.engine import Workload
    from packcli.engine.local import LocalEngine
    from packcli.engine.pool import MIN_BYTES_PER_PROCESS, auto_processes

    size = MIN_BYTES_PER_PROCESS
    assert auto_processes(8, units=100, input_bytes=0) == 1
    assert auto_processes(8, units=100, input_bytes=size - 1) == 1
    assert auto_processes(8, units=100, input_bytes=3 * size) == 3
    assert auto_processes(8, units=2, input_bytes=100 * size) == 2
    assert auto_processes(8, units=100, input_bytes=100 * size) == 8
    assert LocalEngine(workers=4, auto=True).processes(Workload(units=10, input_bytes=size)) == 1
    assert LocalEngine(workers=4, auto=True).processes(Workload(units=10, input_bytes=10 * size)) == 4
    assert LocalEngine(workers=4).processes(Workload(units=10, input_bytes=1)) == 4
    assert LocalEngine(workers=4).processes(Workload(units=2, input_bytes=1)) == 2
    assert LocalEngine(workers=4).processes(None) == 4


def test_a_small_pack_with_default_workers_starts_no_worker(monkeypatch, tmp_path, corpus_files, tokenizer_dir):
    """The CLI's default engine on the fixture corpus (kilobytes, several units) runs in this process alone;
    the same engine given --workers 2 starts one worker. Decided before any process is spawned."""
    from packcli.engine import local, make_engine

    started: list[int] = []
    real = local.SharedPool

    def recording(workers: int, warm=None):  # noqa: ANN001, ANN202
        started.append(workers)
        return real(workers, warm=warm)

    monkeypatch.setattr(local, "SharedPool", recording)
    config = PackConfig(inputs=tuple(corpus_files), tokenizer=str(tokenizer_dir), out=tmp_path / "auto", capacity=512,
                        lines_per_unit=30)
    auto = pack_corpus(config, engine=make_engine("local"))
    assert auto.units > 2 and started == [1]
    two = pack_corpus(dataclasses.replace(config, out=tmp_path / "two"), engine=make_engine("local", workers=2))
    assert started == [1, 2] and two.manifest["manifest_sha256"] == auto.manifest["manifest_sha256"]
