"""`packcli.stats.inputs`: the inputs' token lengths, quantiles against numpy, the same lengths in worker processes and
with pack's backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from packcli.stats import Quantiles, length_stats, terminal_histogram


def test_quantiles_match_numpy():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 5000, 1000)
    q = Quantiles.of(lengths).values
    assert q["p50"] == np.median(lengths) and q["p99.9"] == np.percentile(lengths, 99.9) and q["max"] == lengths.max()


def test_length_stats_on_fixture(tokenizer_dir, corpus_files):
    stats = length_stats(corpus_files, str(tokenizer_dir), capacities=(512, 2048))
    assert stats.examples + stats.rejected == stats.records
    assert stats.total.values["max"] == stats.lengths.max()
    assert len(stats.what_if) == 2 * 5
    assert sum(terminal_histogram(stats.lengths)[i].count("#") > 0 for i in range(3)) >= 1


def test_stats_tokenizes_with_packs_backend_and_gives_the_same_lengths(tokenizer_dir, corpus_files, monkeypatch):
    """Default auto (fastokens where proven exact, guarded; tokenizers on an input too small to pay fastokens'
    load), as pack; the reference on request; same lengths."""
    pytest.importorskip("fastokens")
    from packcli.tokenizer import load

    small = length_stats(corpus_files, str(tokenizer_dir), capacities=(512,))
    assert small.tokenization["backend"] == "tokenizers"
    assert small.tokenization["reason"].startswith("auto: tokenizers, because the input (")
    monkeypatch.setattr(load, "AUTO_FAST_MIN_BYTES", 0)  # as if the fixture corpus were big
    auto = length_stats(corpus_files, str(tokenizer_dir), capacities=(512,))
    ref = length_stats(corpus_files, str(tokenizer_dir), capacities=(512,), backend="tokenizers")
    assert auto.tokenization["backend"] == "fastokens" and auto.tokenization["reason"].startswith("auto: fastokens")
    assert 0 < auto.tokenization["guard"]["checked"] <= auto.tokenization["guard"]["examples"] == auto.examples
    assert ref.tokenization["backend"] == "tokenizers" and ref.tokenization["guard"]["examples"] == 0
    assert np.array_equal(auto.lengths, ref.lengths) and auto.to_dict()["what_if"][0]["packs"] == ref.what_if[0].packs


def test_stats_in_worker_processes_equals_one_process(tokenizer_dir, corpus_files, tmp_path):
    """Units tokenized by two processes give what one process gives: lengths in input order, per-input
    counts, reject reasons and the guard's counts (summed over the units)."""
    good = Path(corpus_files[0]).read_text(encoding="utf-8").splitlines()[:20]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(good[:9] + ["{not json", '{"messages": []}'] + good[9:]) + "\n", encoding="utf-8")
    inputs = [*corpus_files, str(mixed)]
    one = length_stats(inputs, str(tokenizer_dir), capacities=(512,), workers=1)
    two = length_stats(inputs, str(tokenizer_dir), capacities=(512,), workers=2, unit_lines=7)
    assert one.rejected == 2 and len(one.by_input) == len(inputs)
    assert np.array_equal(one.lengths, two.lengths)
    first, second = one.to_dict(), two.to_dict()
    # the guard checks a sample per batch, and units of 7 records make more batches: checked, not examples, differs
    first["tokenization"]["guard"].pop("checked"), second["tokenization"]["guard"].pop("checked")
    for cell in first["what_if"] + second["what_if"]:
        cell.pop("seconds")  # how long each strategy took to pack
    assert first == second and first["tokenization"]["guard"]["examples"] in (0, one.examples)


def test_stats_guard_stops_a_fast_backend_error_naming_file_and_line(tokenizer_dir, corpus_files, monkeypatch):
    """The guard always re-checks a batch's first example: a backend that drops its last token is caught,
    and stats fails naming the record (as pack does), instead of reporting wrong lengths."""
    pytest.importorskip("fastokens")
    from packcli.tokenizer.fast.backend import FastBackend
    from packcli.tokenizer.types import Encoded, EncodedBatch, TokenizerMismatchError

    real = FastBackend.encode

    def drop_first(self, texts, spans, *, add_special_tokens):  # noqa: ANN001, ANN202
        out = list(real(self, texts, spans, add_special_tokens=add_special_tokens))
        out[0] = Encoded(out[0].input_ids[:-1], out[0].labels[:-1], out[0].offsets[:-1])
        return EncodedBatch.of(out)

    monkeypatch.setattr(FastBackend, "encode", drop_first)
    source = corpus_files[0]  # openai.jsonl: every line a good chat record
    with pytest.raises(TokenizerMismatchError) as info:  # fastokens named: auto takes tokenizers on an input this small
        length_stats([source], str(tokenizer_dir), capacities=(512,), backend="fastokens")
    assert info.value.message.startswith(f"{source}:1: fastokens and tokenizers disagree")
    assert length_stats([source], str(tokenizer_dir), capacities=(512,), backend="tokenizers").examples > 0
