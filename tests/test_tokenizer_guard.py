"""The exactness guard: a sample of every fast batch re-encoded by the reference; broken backends are caught."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizer_cases import FIXTURE_JSON, SPANS, TEXTS, broken, reference

from packcli.errors import PackcliError
from packcli.tokenizer.guard import GUARD_PERIOD, encode_batch, guard_sample
from packcli.tokenizer.load import load_tokenizer
from packcli.tokenizer.types import Encoded, EncodedBatch, TokenizerMismatchError

fastokens = pytest.importorskip("fastokens")


def test_guard_catches_a_dropped_token_in_the_first_example():
    expected = reference()[0].input_ids
    with pytest.raises(TokenizerMismatchError) as info:
        encode_batch(broken(victim=0), TEXTS, SPANS, [False] * 3)
    err = info.value
    assert isinstance(err, PackcliError) and err.exit_code == 1
    assert (err.batch_index, err.what, err.position) == (0, "input_ids", len(expected) - 1)
    assert (err.fast, err.reference) == ([], [int(expected[-1])])
    assert "example 0 of the batch" in str(err) and "input_ids differ at token" in str(err)
    assert err.located("chat.jsonl:1832").message.startswith("chat.jsonl:1832: fastokens and tokenizers disagree")


def test_mismatch_hint_names_a_backend_that_exists():
    """The advice is the reference backend, spelled as the library and the CLI take it (it once said 'hf')."""
    from packcli.choices import BackendChoice
    from packcli.cli.options import as_flags

    with pytest.raises(TokenizerMismatchError) as info:
        encode_batch(broken(victim=0), TEXTS, SPANS, [False] * 3)
    assert f"`backend='{BackendChoice.tokenizers.value}'`" in info.value.hint
    assert "(--tokenizer-backend tokenizers)" in as_flags(info.value.hint)


def test_mismatch_error_survives_pickling():
    """Ray sends a worker's exception back pickled; the driver must get the same error, not a TypeError."""
    import pickle

    with pytest.raises(TokenizerMismatchError) as info:
        encode_batch(broken(victim=0), TEXTS, SPANS, [False] * 3)
    located = info.value.located("chat.jsonl:7")
    again = pickle.loads(pickle.dumps(located))
    assert type(again) is TokenizerMismatchError and again.message == located.message and again.hint == located.hint
    assert (again.batch_index, again.what, again.position) == (located.batch_index, located.what, located.position)


def test_guard_reports_the_batch_index_and_position_under_paranoid():
    tok = broken(victim=2, paranoid=True)
    expected = reference(flags=[True] * 3)[2].input_ids
    with pytest.raises(TokenizerMismatchError) as info:
        encode_batch(tok, TEXTS, SPANS, [True] * 3)
    assert info.value.batch_index == 2
    assert info.value.position == len(expected) - 1  # the fast side ran out one token early
    assert info.value.fast == [] and info.value.reference == [int(expected[-1])]


def test_guard_catches_a_flipped_label():
    with pytest.raises(TokenizerMismatchError, match="labels differ at token"):
        encode_batch(broken(victim=0, what="labels"), TEXTS, SPANS, [False] * 3)


def test_guard_misses_an_unsampled_example_but_paranoid_does_not():
    """The sample is the trade-off: a fault outside it passes the default guard."""
    right = reference()
    wrong = EncodedBatch.of([Encoded(e.input_ids[:-1], e.labels[:-1]) for e in right])  # what DropToken hands the guard
    victim = next(i for i in range(len(TEXTS)) if i not in guard_sample(right) + guard_sample(wrong))
    encode_batch(broken(victim=victim), TEXTS, SPANS, [False] * 3)  # not sampled: not caught
    with pytest.raises(TokenizerMismatchError):
        encode_batch(broken(victim=victim, paranoid=True), TEXTS, SPANS, [False] * 3)


def test_offset_mismatch_switches_the_rest_of_the_run_to_the_reference():
    tok = broken(victim=0, what="offsets")
    first = encode_batch(tok, TEXTS, SPANS, [False] * 3)
    assert tok.guard.offset_mismatches == 1 and "offsets differed" in tok.guard.disabled_reason
    np.testing.assert_array_equal(first.offsets, reference().offsets)  # the reference encoded the batch again
    calls = tok.backend.calls
    encode_batch(tok, TEXTS, SPANS, [False] * 3)
    assert tok.backend.calls == calls  # the fast backend is not asked again


def test_offsets_are_checked_on_the_first_example_of_a_batch_and_on_all_under_paranoid():
    """The trade-off of the lean reference: an offset fault past the first example passes the default
    guard (ids and labels, what is stored, are still compared on the whole sample), not paranoid."""
    sampled = encode_batch(load_tokenizer(FIXTURE_JSON, backend="fastokens"), TEXTS, SPANS, [False] * 3)
    assert 1 not in guard_sample(sampled)
    for paranoid, caught in ((False, 0), (True, 1)):
        tok = broken(victim=1, what="offsets", paranoid=paranoid)
        encode_batch(tok, TEXTS, SPANS, [False] * 3)
        assert tok.guard.offset_mismatches == caught and (tok.guard.disabled_reason is None) is not caught


def test_guard_counts_and_samples_deterministically():
    tok = load_tokenizer(FIXTURE_JSON, backend="fastokens")
    texts = [f"example number {k} with some text" for k in range(3000)]
    encoded = encode_batch(tok, texts, [[(0, 7)]] * 3000, [False] * 3000)
    sample = guard_sample(encoded)
    assert sample[0] == 0 and sample == guard_sample(encode_batch(load_tokenizer(FIXTURE_JSON), texts, [[(0, 7)]] * 3000,
                                                                   [False] * 3000))  # the same on either backend
    assert set(guard_sample(encoded[1:])) | {0} == {k - 1 for k in sample if k >= 1} | {0}  # position-independent
    assert 3000 / GUARD_PERIOD / 3 < len(sample) < 3000 / GUARD_PERIOD * 3
    assert tok.guard_checked == len(sample) and tok.guard.examples == 3000
    assert guard_sample(encoded, paranoid=True) == list(range(3000))
