"""Loading a tokenizer: the backend `auto` chooses and why, the files it refuses, and the per-process cache."""

from __future__ import annotations

import json
import sys
from importlib import metadata

import pytest
from tokenizer_cases import FIXTURE_JSON, variant

from packcli.errors import InputError, PackcliError
from packcli.tokenizer.guard import encode_batch
from packcli.tokenizer.load import load_tokenizer
from packcli.tokenizer.types import Encoded, EncodedBatch

fastokens = pytest.importorskip("fastokens")


def test_a_warmed_tokenizer_is_used_only_if_it_resolved_as_the_driver_did(tmp_path):
    from packcli.tokenizer.load import cached_tokenizer, warm_tokenizer

    warm_tokenizer(str(FIXTURE_JSON), "auto", False)  # resolves to fastokens for the fixture
    warmed = cached_tokenizer(FIXTURE_JSON, backend="auto")
    assert warmed.backend_name == "fastokens"
    job = _unit_job(tmp_path, asked="auto", resolved="fastokens", version=warmed.backend_version)
    assert job.build_preparer().tokenizer is warmed  # taken, not loaded again
    reference = _unit_job(tmp_path, asked="auto", resolved="tokenizers",
                          version=load_tokenizer(FIXTURE_JSON).version).build_preparer().tokenizer
    assert reference is not warmed and reference.backend_name == "tokenizers"  # the driver fell back: so does it


def test_a_tokenizer_file_replaced_in_place_is_loaded_again(tmp_path):
    from packcli.tokenizer.load import cached_tokenizer

    path = tmp_path / "tokenizer.json"
    path.write_bytes(FIXTURE_JSON.read_bytes())
    first = cached_tokenizer(path)
    assert cached_tokenizer(path) is first
    data = json.loads(path.read_text())
    data["added_tokens"] = data["added_tokens"][:-1]
    path.write_text(json.dumps(data))
    again = cached_tokenizer(path)
    assert again is not first and again.sha256 != first.sha256


def test_default_is_the_reference_and_auto_picks_fastokens_for_the_fixture():
    assert load_tokenizer(FIXTURE_JSON).backend_name == "tokenizers"  # verify relies on this default
    tok = load_tokenizer(FIXTURE_JSON, backend="auto")
    assert (tok.backend_name, tok.backend_version) == ("fastokens", metadata.version("fastokens"))
    assert tok.backend_reason.startswith("auto: fastokens")


@pytest.mark.parametrize("change,reason", [
    ({"normalizer": {"type": "NFKC"}}, "normalizer"),
    ({"normalizer": {"type": "Lowercase"}}, "normalizer"),
    ({"post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}},
     "trims"),
    ({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}},
     "prefix space"),
])
def test_auto_falls_back_for_unsupported_files(tmp_path, change, reason):
    path = variant(tmp_path, "v", **change)
    tok = load_tokenizer(path, backend="auto")
    assert tok.backend_name == "tokenizers" and reason in tok.backend_reason
    with pytest.raises(InputError, match="cannot encode this tokenizer exactly"):
        load_tokenizer(path, backend="fastokens")


def test_auto_falls_back_for_a_vocabulary_token_outside_the_byte_alphabet(tmp_path):
    spec = json.loads(FIXTURE_JSON.read_text(encoding="utf-8"))
    top = max([*spec["model"]["vocab"].values(), *(t["id"] for t in spec["added_tokens"])]) + 1
    path = variant(tmp_path, "v", model={**spec["model"], "vocab": {**spec["model"]["vocab"], "x😀": top}})
    tok = load_tokenizer(path, backend="auto")
    assert tok.backend_name == "tokenizers" and "'x😀' is not in the byte-level alphabet" in tok.backend_reason


def test_auto_falls_back_for_a_byte_fallback_sentencepiece_bpe(tmp_path):
    from tokenizers import AddedToken, Tokenizer, models, normalizers

    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    for t in ("▁", "a", "b", "▁a", "ab", "▁ab"):
        vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, [("▁", "a"), ("a", "b"), ("▁a", "b")], unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.add_special_tokens([AddedToken("<s>", special=True)])
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = load_tokenizer(tmp_path, backend="auto")
    assert loaded.backend_name == "tokenizers" and "byte-level" in loaded.backend_reason
    out = encode_batch(loaded, ["ab a é <s>"], [[(0, 4)]], [False])[0]
    assert out.input_ids.tolist() == tok.encode("ab a é <s>").ids  # é by byte fallback: <0xC3> <0xA9>


def test_auto_falls_back_when_the_self_check_fails(monkeypatch):
    from packcli.tokenizer.fast import backend as fast_tokenizer

    real = fast_tokenizer.FastBackend._encode_fast

    def drop_last(self, texts, spans, flag):
        out, ok = real(self, texts, spans, flag)
        return EncodedBatch.of([Encoded(e.input_ids[:-1], e.labels[:-1], e.offsets[:-1]) if len(e.input_ids)
                                else e for e in out]), ok
    monkeypatch.setattr(fast_tokenizer.FastBackend, "_encode_fast", drop_last)
    tok = load_tokenizer(FIXTURE_JSON, backend="auto")
    assert tok.backend_name == "tokenizers" and "self-check" in tok.backend_reason


def test_auto_without_fastokens_or_with_another_version(monkeypatch):
    from packcli.tokenizer.fast import backend as fast_tokenizer

    monkeypatch.setattr(fast_tokenizer.metadata, "version", lambda name: "9.9.9")
    assert "validated with 0.3.5" in load_tokenizer(FIXTURE_JSON, backend="auto").backend_reason
    assert load_tokenizer(FIXTURE_JSON, backend="fastokens").backend_name == "fastokens"  # explicit: allowed
    monkeypatch.setitem(sys.modules, "fastokens", None)  # import fails
    assert "not installed" in load_tokenizer(FIXTURE_JSON, backend="auto").backend_reason
    with pytest.raises(InputError, match="not installed"):
        load_tokenizer(FIXTURE_JSON, backend="fastokens")


def test_a_file_fastokens_fails_to_parse_on_its_thread_is_refused_with_the_reason(monkeypatch):
    def refuse(raw):
        raise ValueError("no such pre-tokenizer")
    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", staticmethod(refuse))
    tok = load_tokenizer(FIXTURE_JSON, backend="auto")
    assert tok.backend_name == "tokenizers" and "cannot load it: no such pre-tokenizer" in tok.backend_reason
    with pytest.raises(InputError, match="cannot load it"):
        load_tokenizer(FIXTURE_JSON, backend="fastokens")


@pytest.mark.parametrize("extra", [{}, {"decoder": {"type": "ByteLevel", "normalizer": {"type": "NFC"}}}])
def test_fastokens_gets_the_file_without_its_normalizer(extra):
    """The normalizer's value is cut out of the text where its key is found once (the usual file), and the
    spec is written again where it is not (here: a second key of that name, nested)."""
    from packcli.tokenizer.fast.build import _without_normalizer

    spec = {**json.loads(FIXTURE_JSON.read_text(encoding="utf-8")), "normalizer": {"type": "NFC"}, **extra}
    raw = json.dumps(spec, indent=2)
    out = _without_normalizer(raw, spec)
    assert json.loads(out) == {**spec, "normalizer": None}
    assert ("\n" in out) is not bool(extra)  # cut keeps the file's indentation; written again, it has none
    assert _without_normalizer(raw, {**spec, "normalizer": None}) is raw


def test_a_token_too_long_for_the_kernels_table_is_unsupported(tmp_path):
    from packcli.tokenizer.fast import offsets as fast_kernels

    spec = json.loads(FIXTURE_JSON.read_text(encoding="utf-8"))
    top = max([*spec["model"]["vocab"].values(), *(t["id"] for t in spec["added_tokens"])]) + 1
    long = "a" * (fast_kernels.FIELD_MAX + 1)
    path = variant(tmp_path, "v", model={**spec["model"], "vocab": {**spec["model"]["vocab"], long: top}})
    tok = load_tokenizer(path, backend="auto")
    assert tok.backend_name == "tokenizers" and f"a token of {len(long)} bytes" in tok.backend_reason
    assert load_tokenizer(FIXTURE_JSON, backend="auto").backend_name == "fastokens"  # the same file without it


def test_unknown_backend_is_an_input_error():
    with pytest.raises(InputError, match="unknown"):
        load_tokenizer(FIXTURE_JSON, backend="fastest")  # type: ignore[arg-type]


def _unit_job(tmp_path, *, asked: str, resolved: str, version: str, sha256: str | None = None, command: str = "pack"):
    from packcli.chat import load_template
    from packcli.job.units import UnitJob
    from packcli.prepare import PrepareSpec, TokenizerRef

    tokenizer = TokenizerRef(str(FIXTURE_JSON), sha256 or load_tokenizer(FIXTURE_JSON).sha256, asked, resolved, version)
    spec = PrepareSpec(tokenizer, template_text=load_template("chatml").text, template_source="builtin:chatml",
                       template_date="2024-07-26", loss="auto", input_format="auto")
    return UnitJob(spec, batch_records=8, fail_fast=False, work_dir=str(tmp_path), config_hash=f"{asked}-{resolved}",
                   command=command)


def test_a_worker_with_another_backend_version_refuses(tmp_path):
    job = _unit_job(tmp_path, asked="fastokens", resolved="fastokens", version="0.0.1")
    with pytest.raises(PackcliError, match="the driver resolved 0.0.1"):
        job.build_preparer()


def test_a_worker_that_finds_another_tokenizer_file_refuses(tmp_path):
    job = _unit_job(tmp_path, asked="tokenizers", resolved="tokenizers", version=load_tokenizer(FIXTURE_JSON).version,
                    sha256="0" * 64)
    with pytest.raises(PackcliError, match="changed while pack ran"):
        job.build_preparer()
    stats_job = _unit_job(tmp_path, asked="tokenizers", resolved="tokenizers",
                          version=load_tokenizer(FIXTURE_JSON).version, sha256="0" * 64, command="stats")
    with pytest.raises(PackcliError, match="changed while stats ran"):  # a stats worker names stats, not pack
        stats_job.build_preparer()


def test_auto_on_a_small_input_takes_tokenizers_and_says_why():
    """The small-input rule is the tokenizer's own (pack and stats alike): ``auto`` below AUTO_FAST_MIN_BYTES
    loads the reference, with the reason; a size at the bound, an unknown size, or an explicit choice do not."""
    from packcli.tokenizer.load import AUTO_FAST_MIN_BYTES, auto_backend, cached_tokenizer

    small = cached_tokenizer(FIXTURE_JSON, backend="auto", input_bytes=AUTO_FAST_MIN_BYTES - 1)
    assert small.backend_name == "tokenizers"
    assert small.backend_reason == ("auto: tokenizers, because the input (4.0 MiB) is under 4 MiB, where loading "
                                    "fastokens costs more than it saves")
    assert cached_tokenizer(FIXTURE_JSON, backend="auto", input_bytes=AUTO_FAST_MIN_BYTES).backend_name == "fastokens"
    assert cached_tokenizer(FIXTURE_JSON, backend="auto").backend_name == "fastokens"
    assert cached_tokenizer(FIXTURE_JSON, backend="fastokens", input_bytes=1).backend_name == "fastokens"
    assert auto_backend("tokenizers", 1) == (auto_backend("tokenizers", None)[0], None)
    # the reference asked for directly is cached apart from auto's, whose reason differs
    assert cached_tokenizer(FIXTURE_JSON, backend="tokenizers").backend_reason == "requested"


@pytest.mark.parametrize("content", ["", "not json {", "[]"])
def test_corrupt_tokenizer_is_a_clear_error(tmp_path, content):
    (tmp_path / "tokenizer.json").write_text(content)
    with pytest.raises(InputError, match="not a valid tokenizer.json"):
        load_tokenizer(tmp_path / "tokenizer.json")


def test_missing_tokenizer(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_tokenizer(tmp_path / "nope.json")
    with pytest.raises(InputError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
