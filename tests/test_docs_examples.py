"""The example records in docs/formats.md are real: each packs with no reject, as the format it names."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
from conftest import FIXTURES, ROOT

from packcli.config import PackConfig
from packcli.job.run import pack_corpus


def _examples() -> list[tuple[str, dict]]:
    """(the section's format, the record) for every ```json block of docs/formats.md."""
    found, section, block = [], None, None
    for line in (ROOT / "docs" / "formats.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            match = re.search(r"`([a-z-]+)`", line)
            section = match.group(1) if match else None
        elif line == "```json":
            block = []
        elif line == "```" and block is not None:
            found.append((section, json.loads("\n".join(block))))
            block = None
        elif block is not None:
            block.append(line)
    return found


def test_every_example_record_packs_as_the_format_its_section_names(tmp_path):
    examples = _examples()
    assert {fmt for fmt, _ in examples} == {"messages", "sharegpt", "prompt-completion", "text"}
    data = tmp_path / "examples.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for _, record in examples), encoding="utf-8")
    summary = pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(FIXTURES / "tokenizer"), out=tmp_path / "o",
                                     capacity=1024))
    assert summary.manifest["counts"]["rejected"] == 0
    seam = pq.read_table(tmp_path / "o" / "examples.parquet").to_pydict()
    assert seam["format"] == [fmt for fmt, _ in examples]
    assert all(status == "packed" for status in seam["status"])
