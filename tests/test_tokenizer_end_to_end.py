"""Both backends through `pack` and `verify`: the same bytes, a loud stop on a mismatch, verify re-tokenizing with the reference."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
from conftest import artifact_bytes
from tokenizer_cases import drop_last_token_of_third_example, pack_with

from packcli.contract import IGNORE_INDEX, MANIFEST_NAME
from packcli.tokenizer.fast.backend import FastBackend
from packcli.tokenizer.types import Encoded, EncodedBatch, TokenizerMismatchError

fastokens = pytest.importorskip("fastokens")


def test_pack_gives_the_same_bytes_with_either_backend_and_says_which_ran(tmp_path, corpus_files, monkeypatch):
    from packcli.tokenizer import load

    hf = pack_with(tmp_path, corpus_files, "hf", tokenizer_backend="tokenizers")
    fast = pack_with(tmp_path, corpus_files, "fast", tokenizer_backend="fastokens", paranoid_tokenizer=True)
    small = pack_with(tmp_path, corpus_files, "small")  # the default, auto, on an input too small to pay the load
    monkeypatch.setattr(load, "AUTO_FAST_MIN_BYTES", 0)  # as if the fixture corpus were big
    auto = pack_with(tmp_path, corpus_files, "auto")
    assert small.manifest["manifest_sha256"] == hf.manifest["manifest_sha256"]
    chosen = small.manifest["unhashed"]["tokenization"]
    assert chosen["backend"] == "tokenizers" and chosen["reason"].startswith("auto: tokenizers, because the input (")
    assert hf.manifest["manifest_sha256"] == fast.manifest["manifest_sha256"] == auto.manifest["manifest_sha256"]
    assert artifact_bytes(tmp_path / "hf", hf.manifest) == artifact_bytes(tmp_path / "fast", fast.manifest)
    ran = {k: s.manifest["unhashed"]["tokenization"] for k, s in (("hf", hf), ("fast", fast), ("auto", auto))}
    assert ran["hf"]["backend"] == "tokenizers" and ran["hf"]["guard"]["examples"] == 0
    assert (ran["fast"]["backend"], ran["fast"]["version"]) == ("fastokens", metadata.version("fastokens"))
    counts = fast.manifest["counts"]
    encoded = counts["packed"] + counts["truncated"] + counts["dropped"]
    assert ran["fast"]["paranoid"] and ran["fast"]["guard"]["checked"] == ran["fast"]["guard"]["examples"] >= encoded
    assert ran["auto"]["backend"] == "fastokens" and ran["auto"]["reason"].startswith("auto: fastokens")
    assert 0 < ran["auto"]["guard"]["checked"] < ran["auto"]["guard"]["examples"]  # a sample, not all


def test_a_fast_backend_error_stops_pack_naming_file_and_line(tmp_path, corpus_files, monkeypatch):
    drop_last_token_of_third_example(monkeypatch)
    source = corpus_files[0]  # openai.jsonl: every line a good chat record, so the third example is line 3
    with pytest.raises(TokenizerMismatchError) as info:
        pack_with(tmp_path, [source], "o", tokenizer_backend="fastokens", paranoid_tokenizer=True)
    assert info.value.message.startswith(f"{source}:3: fastokens and tokenizers disagree: input_ids differ")
    assert info.value.exit_code == 1
    assert not (tmp_path / "o").exists() and not list(tmp_path.rglob(MANIFEST_NAME))


def test_verify_reconstructs_with_the_reference_so_an_unsampled_fault_cannot_pass(tmp_path, corpus_files, monkeypatch):
    """The guard's sample is switched off, so the broken backend's output lands in the artifact; verify,
    which always re-tokenizes with tokenizers, must report exactly the corrupted examples."""
    from packcli.verify import verify_artifact

    drop_last_token_of_third_example(monkeypatch)
    monkeypatch.setattr("packcli.tokenizer.guard.guard_sample", lambda texts, paranoid=False: [])
    pack_with(tmp_path, corpus_files[:1], "o", tokenizer_backend="fastokens")
    monkeypatch.undo()
    report = verify_artifact(tmp_path / "o")
    check = next(c for c in report.checks if c.name == "reconstruction")
    assert not check.ok and {v.line for v in check.violations} == {3}
    assert all(v.source == Path(corpus_files[0]).name for v in check.violations)  # the location-free name


def test_verify_counts_every_corrupted_example_and_explains_the_first_few(tmp_path, corpus_files, monkeypatch):
    """Every example's last token replaced (label kept consistent, so only reconstruction can tell), in
    worker processes: all are counted, and the first ``max_violations`` name the differing position."""
    from packcli.verify import verify_artifact

    real = FastBackend.encode

    def encode(self, texts, spans, *, add_special_tokens):
        out = []
        for e in real(self, texts, spans, add_special_tokens=add_special_tokens):
            ids, labels = e.input_ids.copy(), e.labels.copy()
            ids[-1] = (ids[-1] + 1) % 200
            labels[-1] = ids[-1] if labels[-1] != IGNORE_INDEX else IGNORE_INDEX
            out.append(Encoded(ids, labels, e.offsets))
        return EncodedBatch.of(out)
    monkeypatch.setattr(FastBackend, "encode", encode)
    monkeypatch.setattr("packcli.tokenizer.guard.guard_sample", lambda texts, paranoid=False: [])
    packed = pack_with(tmp_path, corpus_files[:1], "o", tokenizer_backend="fastokens").manifest["counts"]["packed"]
    monkeypatch.undo()
    report = verify_artifact(tmp_path / "o", max_violations=20, workers=2)
    check = next(c for c in report.checks if c.name == "reconstruction")
    assert check.count >= packed and len(check.violations) == 20  # explained ones count tokens and labels
    # an example in a pack names the differing position; a dropped one (in no pack) only its token_hash
    in_packs = [v for v in check.violations if v.field != "token_hash"]
    assert in_packs and all("differ from a fresh tokenization at position" in v.message for v in in_packs), in_packs
    assert next(c for c in report.checks if c.name == "pack_layout").ok  # a consistent forgery


def test_a_rerun_on_the_other_backend_reuses_no_unit(tmp_path, corpus_files, monkeypatch):
    """After a mismatch the advice is to re-run with --tokenizer-backend tokenizers: that must re-tokenize everything."""
    import packcli.job.run as pipeline
    from packcli.prepare import Preparer

    monkeypatch.setattr(pipeline, "apply_overlong", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        pack_with(tmp_path, corpus_files, "o", tokenizer_backend="fastokens", lines_per_unit=25)
    monkeypatch.undo()
    assert list((tmp_path / ".packcli-work-o").glob("unit-*.json"))
    calls = []
    real = Preparer.prepare
    monkeypatch.setattr(Preparer, "prepare", lambda self, batch, **kw: calls.append(len(batch)) or real(self, batch, **kw))
    summary = pack_with(tmp_path, corpus_files, "o", tokenizer_backend="tokenizers", lines_per_unit=25)
    assert sum(calls) == summary.manifest["counts"]["records"]
