"""`packcli.data.collate`: the collators a trainer batches packs with (varlen, flattening, Hugging Face names), their
fixed shapes, tensors, and the supervised counts."""

from __future__ import annotations

import numpy as np
import pytest

from packcli.data import collate_flattening, collate_varlen, iter_packs


def test_iter_and_collate(packed):
    packs = list(iter_packs(packed))
    assert packs and all(len(p.input_ids) == p.cu_seqlens[-1] for p in packs)
    batch = collate_varlen(packs[:3])
    total = sum(len(p.input_ids) for p in packs[:3])
    assert batch["input_ids"].shape == (1, total) and batch["cu_seqlens"][-1] == total
    assert len(batch["cu_seqlens"]) == sum(len(p.example_ids) for p in packs[:3]) + 1
    seg = np.diff(batch["cu_seqlens"])
    assert batch["max_seqlen"] == seg.max()
    # positions restart exactly at the global seams
    assert np.all(batch["position_ids"][0][batch["cu_seqlens"][:-1]] == 0)


def test_fixed_shapes(packed):
    packs = list(iter_packs(packed))[:2]
    batch = collate_varlen(packs, pad_to=4096, fixed_segments=64)
    assert batch["input_ids"].shape == (1, 4096) and batch["cu_seqlens"].shape == (65,)
    assert np.all(batch["labels"][0][sum(len(p.input_ids) for p in packs):] == -100)
    with pytest.raises(ValueError, match="pad_to"):
        collate_varlen(packs, pad_to=10)


def test_flattening_has_no_attention_mask(packed):
    batch = collate_flattening(list(iter_packs(packed))[:2])
    assert set(batch) == {"input_ids", "labels", "position_ids"}


def test_collate_hf_names_and_fixed_shapes(packed):
    from packcli.data import collate_hf

    packs = list(iter_packs(packed))[:3]
    batch = collate_hf(packs, as_torch=False)
    assert set(batch) == {"input_ids", "labels", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                          "max_length_k"}
    seams = np.concatenate([[0], np.cumsum(np.concatenate([p.seq_lengths for p in packs]))])
    assert np.array_equal(batch["cu_seq_lens_q"], seams) and batch["cu_seq_lens_q"].dtype == np.int32
    assert batch["max_length_q"] == batch["max_length_k"] == int(np.diff(seams).max())
    fixed = collate_hf(packs, pad_to=3 * 1024, fixed_segments=128, max_seqlen=1024, as_torch=False)
    assert fixed["input_ids"].shape == (1, 3 * 1024) and fixed["cu_seq_lens_q"].shape == (129,)
    assert fixed["max_length_q"] == 1024
    with pytest.raises(ValueError, match="max_seqlen"):
        collate_hf(packs, max_seqlen=int(np.diff(seams).max()) - 1, as_torch=False)
    with pytest.raises(ValueError, match="fixed_segments"):
        collate_hf(packs, fixed_segments=len(seams) - 2, as_torch=False)


@pytest.mark.torch
def test_collations_return_tensors_when_asked(packed):
    torch = pytest.importorskip("torch")
    from packcli.data import collate_hf

    packs = list(iter_packs(packed))[:2]
    flat = collate_flattening(packs, as_torch=True)
    assert set(flat) == {"input_ids", "labels", "position_ids"}
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.int64 for v in flat.values())
    hf = collate_hf(packs)  # tensors by default where torch is installed
    assert hf["input_ids"].dtype == torch.int64 and hf["cu_seq_lens_q"].dtype == torch.int32
    assert isinstance(hf["max_length_q"], int)
    varlen = collate_varlen(packs, as_torch=True)
    assert varlen["cu_seqlens"].dtype == torch.int32 and varlen["position_ids"].dtype == torch.int64


def test_num_supervised_and_features(packed):
    from packcli.data import num_supervised, split_examples, trl_features

    packs = list(iter_packs(packed))[:2]
    batch = collate_varlen(packs)
    assert num_supervised(batch) == sum(p.num_supervised for p in packs) > 0
    features = trl_features(packs[0])
    assert set(features) == {"input_ids", "labels", "seq_lengths"}
    assert features["seq_lengths"] == np.diff(packs[0].cu_seqlens).tolist()
    examples = split_examples(packs[0])
    assert len(examples) == len(packs[0].example_ids)
    assert sum((e["input_ids"] for e in examples), []) == packs[0].input_ids.tolist()
    assert all(e["labels"][0] == -100 for e in examples)
