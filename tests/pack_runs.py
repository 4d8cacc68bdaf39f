"""The small ``pack`` run the fault and interrupt tests hold, kill and interrupt, and how they wait for it.

Two fixture inputs at capacity 512, 40 lines a unit, 4 packs a shard: 4 units and 10+ shards, so a
run has a unit, a shard, the rename and the swap to be held at (`packcli.job.pause`).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from conftest import FIXTURES, artifact_bytes

from packcli.config import PackConfig
from packcli.job.run import pack_corpus

INPUTS = (str(FIXTURES / "corpus" / "openai.jsonl"), str(FIXTURES / "corpus" / "text.jsonl"))
TOKENIZER = str(FIXTURES / "tokenizer")
SETTINGS = ["-c", "512", "--packs-per-shard", "4", "--unit-lines", "40"]  # the CLI's spelling of `config`
WAIT = 240  # seconds: an upper bound for a subprocess to import, load the tokenizer and reach a point


def config(out: Path, **kw) -> PackConfig:
    return PackConfig(inputs=INPUTS, tokenizer=TOKENIZER, out=out, capacity=512, packs_per_shard=4,
                      lines_per_unit=40, **kw)


def reference_run(out: Path) -> tuple[str, dict[str, bytes]]:
    """An uninterrupted run into ``out``: its manifest hash and bytes (and numba's caches warm for subprocesses)."""
    summary = pack_corpus(config(out))
    return summary.manifest["manifest_sha256"], artifact_bytes(out, summary.manifest)


def held(proc: subprocess.Popen, marker: Path, log: Path | None = None) -> int:
    """Wait until the run holds at ``marker``; return the pid of the process holding there."""
    deadline = time.monotonic() + WAIT
    while not marker.exists():
        if proc.poll() is not None:
            said = log.read_text() if log is not None else proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"exited {proc.returncode} before {marker.name}: {said}")
        assert time.monotonic() < deadline, f"did not reach {marker.name} in {WAIT} s"
        time.sleep(0.05)
    return int(marker.read_text())
