"""The loader iterates an artifact within a fixed budget under a real cap: a child process whose data segment
(RLIMIT_DATA: private writable mappings, the heap included) may grow by `BUDGET` beyond what it holds
after iterating a small artifact once, iterates an artifact eight times larger, shuffled, to the end. A
loader that reads a whole column (every pack's tokens at once) is stopped there by a MemoryError: the test
plants one to show it.

Arrow's default allocator (mimalloc) reserves its arenas as writable mappings, so the data segment
would count reservations, not use; the child runs Arrow on the system allocator
(``ARROW_DEFAULT_MEMORY_POOL=system``), which maps what it uses. The budget is a difference against
the same process after a warm-up, not an absolute size, so it holds whatever the libraries' own
footprint on a machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PACKS_PER_SHARD = 64  # a row group of 64 packs of 1,024 tokens: ~0.25 MiB a column decoded
CAPACITY = 1024
BUDGET = 8 << 20  # ~10 row groups decoded, and the order; a third of the large artifact's token columns (~24 MiB)
SMALL, LARGE = 250, 2_000  # packs

CHILD = r"""
import os, resource, sys
from packcli.data import PackDataset

def data_bytes():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))

if sys.argv[3] == "whole":  # the planted loader: every shard's columns read at once, on the first row group
    import pyarrow.parquet as pq
    from packcli.data.read import PackReader
    plain = PackReader.read
    def whole(self, group):
        if not hasattr(self, "_all"):
            self._all = [pq.read_table(self.directory / name) for name in self.shards]
        return plain(self, group)
    PackReader.read = whole

def passes(directory):
    return sum(PackDataset(directory, collate=len, batch_packs=4, shuffle=True, seed=1))

passes(sys.argv[1])  # imports, first-call caches and the allocator's own pages out of the measurement
cap = data_bytes() + int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_DATA, (cap, resource.getrlimit(resource.RLIMIT_DATA)[1]))
try:
    print(passes(sys.argv[2]))
except MemoryError:
    print("MemoryError")
    sys.exit(3)
"""


def long_records_artifact(tmp: Path, packs: int) -> Path:
    """An artifact of ``packs`` packs of about `CAPACITY` tokens: one long text record each (sequential)."""
    corpus = tmp / f"long{packs}.jsonl"
    words = " ".join(f"w{k % 97}" for k in range(1_000))  # ~1,000+ tokens with the fixture tokenizer
    corpus.write_text("".join(json.dumps({"text": f"{i} {words}"}) + "\n" for i in range(packs)))
    out = tmp / f"a{packs}"
    subprocess.run([sys.executable, "-m", "packcli", "pack", str(corpus), "-t", str(ROOT / "fixtures" / "tokenizer"),
                    "-c", str(CAPACITY), "--overlong", "truncate", "--strategy", "sequential", "--packs-per-shard",
                    str(PACKS_PER_SHARD), "-o", str(out), "--force"], check=True, capture_output=True, cwd=ROOT)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["packs"] == packs
    tokens = manifest["counts"]["tokens"]
    assert tokens >= packs * CAPACITY * 0.9  # the packs are as full as the sizes above assume
    if packs == LARGE:  # ids, labels and positions (int32 each) of every pack: what a whole-column loader holds
        assert 12 * tokens >= 2.5 * BUDGET
    return out


def capped_pass(small: Path, large: Path, loader: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    return subprocess.run([sys.executable, "-c", CHILD, str(small), str(large), loader, str(BUDGET)], check=False,
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("capped")
    return long_records_artifact(tmp, SMALL), long_records_artifact(tmp, LARGE)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA caps mappings on Linux (4.7+)")
def test_the_loader_iterates_eight_times_the_packs_under_a_fixed_cap(artifacts: tuple[Path, Path]) -> None:
    run = capped_pass(*artifacts, "rows")
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert run.stdout.split() == [str(LARGE)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA caps mappings on Linux (4.7+)")
def test_the_cap_stops_a_loader_that_reads_whole_columns(artifacts: tuple[Path, Path]) -> None:
    run = capped_pass(*artifacts, "whole")
    assert run.returncode == 3 and run.stdout.split() == ["MemoryError"], run.stdout + run.stderr[-3000:]
