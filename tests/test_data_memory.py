"""The loader's memory follows a row group, not the artifact: iterating four times the packs (row groups
of the same size) costs at most the epoch order's two int64 a pack more (Python and numpy allocations,
measured with tracemalloc: the same count on every machine, unlike RSS)."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

from conftest import ROOT

from packcli.data import PackDataset

PACKS_PER_SHARD = 256  # one row group a shard: every artifact below decodes blocks of this many packs


def one_pack_each(tmp: Path, records: int) -> Path:
    """An artifact of ``records`` tiny text records, one pack each (capacity 16, sequential)."""
    corpus = tmp / f"t{records}.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"record {i} says hello"}) + "\n" for i in range(records)))
    out = tmp / f"a{records}"
    subprocess.run([sys.executable, "-m", "packcli", "pack", str(corpus), "-t", str(ROOT / "fixtures" / "tokenizer"),
                    "-c", "16", "--strategy", "sequential", "--packs-per-shard", str(PACKS_PER_SHARD), "-o", str(out),
                    "--force"], check=True, capture_output=True, cwd=ROOT)
    assert json.loads((out / "manifest.json").read_text())["counts"]["packs"] == records
    return out


def count(packs) -> int:
    return len(packs)


def iteration_peak(directory: Path) -> int:
    """Peak bytes allocated (above the start) while a dataset over ``directory`` is built and iterated whole."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        dataset = PackDataset(directory, collate=count, shuffle=True, seed=3)
        seen = sum(dataset)
        assert seen == dataset.reader.num_packs
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_iterating_four_times_the_packs_costs_the_order_alone(tmp_path: Path) -> None:
    small, large = one_pack_each(tmp_path, 2_000), one_pack_each(tmp_path, 8_000)
    iteration_peak(small)  # imports and first-call caches out of the measurement
    grown = iteration_peak(large) - iteration_peak(small)
    order = 2 * 8 * 6_000  # the epoch order and this rank's packs: an int64 each a pack
    assert grown <= order + 64 * 1024, f"{grown} bytes more for 6,000 more packs"
