"""The training recipes of docs/training.md, run on CPU with tiny random models (no downloads).

1. TRL SFTTrainer on load_dataset("parquet", ...) of the shards, padding-free, preparation skipped.
3. A plain torch loop with flash_attn_varlen_func-style kwargs into an sdpa attention with a block mask.
And the loss normaliser of docs/training.md across gradient accumulation and ranks, on per-token
loss vectors against each example run alone. (Recipe 2, the loader: tests/test_data_dataset.py.)
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import FIXTURES

from packcli.contract import IGNORE_INDEX
from packcli.data import iter_packs

pytestmark = pytest.mark.torch


def tiny_llama(vocab: int, seed: int = 0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                                      use_cache=False)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").float()


def alone_token_losses(model, pack):
    """Per-token loss of every example of ``pack`` run alone, in pack order (supervised tokens only)."""
    import torch
    import torch.nn.functional as F

    out = []
    for a, b in zip(pack.cu_seqlens[:-1].tolist(), pack.cu_seqlens[1:].tolist()):
        ids = torch.tensor(pack.input_ids[a:b], dtype=torch.long)[None]
        labels = torch.tensor(pack.labels[a:b], dtype=torch.long)
        logits = model(input_ids=ids, use_cache=False).logits[0]
        losses = F.cross_entropy(logits[:-1].float(), labels[1:], ignore_index=IGNORE_INDEX, reduction="none")
        out.append(losses[labels[1:] != IGNORE_INDEX])
    return torch.cat(out)


def packed_token_losses(model, batch):
    import torch.nn.functional as F

    logits = model(**batch).logits[0]
    labels = batch["labels"][0]
    losses = F.cross_entropy(logits[:-1].float(), labels[1:], ignore_index=IGNORE_INDEX, reduction="none")
    return losses[labels[1:] != IGNORE_INDEX]


@pytest.mark.slow  # SFTTrainer's set-up: ~20 s a run on a shared 2-core machine
@pytest.mark.parametrize("with_seq_lengths", [True, False])
def test_recipe_trl_sft_trainer(packed, tmp_path, monkeypatch, with_seq_lengths):
    """SFTTrainer as docs/training.md sets it up; a forward hook records what the model received.
    With seq_lengths: positions and boundaries are the seams and step 1's loss is the examples' loss
    alone. Without (the control): the hook sees positions that never restart."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("trl")
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(str(FIXTURES / "tokenizer"))
    files = sorted(str(p) for p in packed.glob("shard-*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "cache"))
    ds = ds.select(range(4))
    if not with_seq_lengths:
        ds = ds.remove_columns(["seq_lengths"])
    model = tiny_llama(len(tokenizer))
    control = copy.deepcopy(model).eval()
    received, losses = [], []

    def hook(module, args, kwargs):
        received.append({k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in kwargs.items()})

    model.register_forward_pre_hook(hook, with_kwargs=True)
    args = SFTConfig(output_dir=str(tmp_path / "out"), padding_free=True, max_length=None,
                     dataset_kwargs={"skip_prepare_dataset": True}, per_device_train_batch_size=2, max_steps=2,
                     learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0,
                     dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    compute = trainer.compute_loss

    def spy(*a, **k):
        loss = compute(*a, **k)
        losses.append(loss.detach().clone())
        return loss

    trainer.compute_loss = spy
    trainer.train()
    train_steps = [r for r in received if "labels" in r]
    assert len(train_steps) == 2 and len(losses) == 2
    packs = list(iter_packs(packed))[:4]
    by_first = {tuple(p.input_ids[:16].tolist()): p for p in packs}
    for step in train_steps:
        ids = step["input_ids"][0].numpy()
        assert "attention_mask" not in step
        # which two packs this batch holds: each starts where the previous ends
        first = by_first[tuple(ids[:16].tolist())]
        second = by_first[tuple(ids[len(first.input_ids):len(first.input_ids) + 16].tolist())]
        lengths = np.concatenate([np.diff(first.cu_seqlens), np.diff(second.cu_seqlens)])
        seams = np.concatenate([[0], np.cumsum(lengths)])
        positions = np.arange(seams[-1]) - np.repeat(seams[:-1], lengths)
        assert len(ids) == seams[-1]  # nothing truncated
        got_positions = step["position_ids"][0].numpy()
        if with_seq_lengths:
            assert np.array_equal(got_positions, positions)
            assert np.array_equal(step["cu_seq_lens_q"].numpy(), seams)
            assert np.all(step["labels"][0].numpy()[seams[:-1]] == IGNORE_INDEX)
        else:  # the leak the contract-2 column exists for: one segment per row, positions run on
            assert not np.array_equal(got_positions, positions)
            assert len(step["cu_seq_lens_q"]) == 3
    step1 = [first_pack for first_pack in packs if tuple(first_pack.input_ids[:16].tolist())
             == tuple(train_steps[0]["input_ids"][0, :16].tolist())][0]
    rest = train_steps[0]["input_ids"][0, len(step1.input_ids):len(step1.input_ids) + 16].tolist()
    step1_packs = [step1, by_first[tuple(rest)]]
    with torch.no_grad():
        alone = torch.cat([alone_token_losses(control, p) for p in step1_packs])
    expected = alone.sum() / len(alone)  # TRL's reduction: summed token losses over supervised tokens
    if with_seq_lengths:
        torch.testing.assert_close(losses[0], expected, rtol=1e-5, atol=1e-5)
    else:
        assert abs(float(losses[0]) - float(expected)) > 1e-4


def varlen_sdpa(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=True):
    """``flash_attn_varlen_func``'s signature on CPU: sdpa with a block-diagonal causal mask from cu_seqlens.
    q, k, v: [T, heads, dim]."""
    import torch
    import torch.nn.functional as F

    assert torch.equal(cu_seqlens_q, cu_seqlens_k) and causal
    t = q.shape[0]
    seg = torch.repeat_interleave(torch.arange(len(cu_seqlens_q) - 1), (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long(),
                                  output_size=t)
    idx = torch.arange(t)
    mask = (seg[:, None] == seg[None, :]) & (idx[:, None] >= idx[None, :])
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask)
    return out.transpose(0, 1)


def causal_only(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=True):
    """The negative control: ignores the boundaries, as a plain causal kernel does."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                          is_causal=True).transpose(0, 1)


def make_varlen_model(vocab: int, attention):
    """A one-layer decoder that takes flash_attn_varlen_func's kwargs (cu_seqlens, max_seqlen)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class VarlenLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.pos = nn.Embedding(vocab, 32), nn.Embedding(2048, 32)
            self.qkv, self.out, self.head = nn.Linear(32, 96), nn.Linear(32, 32), nn.Linear(32, vocab)

        def forward(self, input_ids, position_ids, cu_seqlens, max_seqlen):
            x = self.embed(input_ids[0]) + self.pos(position_ids[0])
            q, k, v = self.qkv(x).view(-1, 3, 4, 8).unbind(1)
            h = attention(q, k, v, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens, max_seqlen_q=max_seqlen,
                          max_seqlen_k=max_seqlen, causal=True)
            return self.head(x + self.out(h.reshape(-1, 32)))[None]

    torch.manual_seed(0)
    return VarlenLM()


def test_recipe_plain_torch_loop_with_varlen_kwargs(packed):
    """collate_varlen's cu_seqlens/max_seqlen into a varlen attention: each example's logits are what it
    gets alone; a kernel that ignores the boundaries is caught by the same comparison."""
    import torch

    from packcli.data import PackDataset, collate_varlen

    def collate(packs):
        return collate_varlen(packs, as_torch=True)

    packs = list(iter_packs(packed))[:2]
    batch = collate(packs)
    inputs = {k: batch[k] for k in ("input_ids", "position_ids", "cu_seqlens", "max_seqlen")}
    for attention, leaks in ((varlen_sdpa, False), (causal_only, True)):
        model = make_varlen_model(2816, attention)
        with torch.no_grad():
            logits = model(**inputs)[0]
            cu = batch["cu_seqlens"].tolist()
            worst = 0.0
            for a, b in zip(cu[:-1], cu[1:]):
                alone = model(batch["input_ids"][:, a:b], batch["position_ids"][:, a:b],
                              torch.tensor([0, b - a], dtype=torch.int32), b - a)[0]
                worst = max(worst, float((logits[a:b] - alone).abs().max()))
        assert (worst > 1e-3) if leaks else (worst < 1e-5), (attention.__name__, worst)
    # and it trains: two optimizer steps from the loader, loss normalised by supervised tokens
    model = make_varlen_model(2816, varlen_sdpa)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = PackDataset(packed, batch_packs=2, collate=collate, seed=0)
    for step, batch in zip(range(2), loader):
        logits = model(**{k: batch[k] for k in ("input_ids", "position_ids", "cu_seqlens", "max_seqlen")})[0]
        labels = batch["labels"][0]
        loss = torch.nn.functional.cross_entropy(logits[:-1], labels[1:], ignore_index=IGNORE_INDEX, reduction="sum")
        (loss / int((labels != IGNORE_INDEX).sum())).backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss)


def test_loss_normaliser_across_accumulation_and_ranks(packed):
    """docs/training.md: with N = supervised labels of the whole step (all micro-batches, all ranks),
    each micro-batch's loss sum(token losses) * world_size / N, summed over accumulation and averaged
    over ranks (what DDP does to gradients), is the mean token loss of the examples run alone, and its
    gradient is that mean's gradient. The per-micro-batch mean, averaged, is not (the control)."""
    import torch

    from packcli.data import PackDataset, collate_hf, global_supervised

    world, accumulation = 2, 2
    model = tiny_llama(2816, seed=1)
    ranks = [PackDataset(packed, batch_packs=1, collate=lambda p: (p, collate_hf(p)), seed=3, rank=r, world_size=world)
             for r in range(world)]
    micro = [[b for _, b in zip(range(accumulation), ds)] for ds in ranks]  # [rank][step] -> (packs, batch)
    n = sum(global_supervised([batch for _, batch in per_rank]) for per_rank in micro)  # what all_reduce sums

    params = [p for p in model.parameters() if p.requires_grad]

    def grads(loss):
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params, retain_graph=True)])

    # the unpacked control: every example alone, one mean over all supervised tokens of the step
    alone = torch.cat([alone_token_losses(model, pack) for per_rank in micro for packs, _ in per_rank for pack in packs])
    assert len(alone) == n
    target_loss = alone.mean()
    target = grads(target_loss)

    ddp, naive, total = 0, 0, 0.0
    for per_rank in micro:
        rank_grad, rank_naive = 0, 0
        for packs, batch in per_rank:
            tokens = packed_token_losses(model, batch)
            torch.testing.assert_close(tokens, alone_token_losses(model, packs[0]), rtol=1e-4, atol=1e-5)
            loss = tokens.sum() * world / n
            total += float(loss.detach()) / world
            rank_grad = rank_grad + grads(loss)
            rank_naive = rank_naive + grads(tokens.mean() / accumulation)
        ddp, naive = ddp + rank_grad / world, naive + rank_naive / world  # DDP averages gradients over ranks
    assert abs(total - float(target_loss.detach())) < 1e-5
    torch.testing.assert_close(ddp, target, rtol=1e-4, atol=1e-6)
    assert float((naive - target).abs().max()) > 1e-4  # mean of means weighs tokens unequally


def test_gpu_check_loader_row_on_cpu_stand_ins():
    """scripts/gpu_check.py's loader:flash-attn row, with flash_attn_varlen_func replaced by the sdpa
    stand-in above (it passes) and by a kernel that ignores cu_seqlens (it fails): the measurement a
    GPU run makes is itself tested here. On CPU the real row refuses to run, naming why."""
    from conftest import load_script

    gpu_check = load_script("gpu_check")
    packs = gpu_check.fixture_packs(2816)

    def gqa(kernel):
        def run(q, k, v, cu_q, cu_k, max_q, max_k, causal=True):
            rep = q.shape[1] // k.shape[1]
            return kernel(q.float(), k.float().repeat_interleave(rep, 1), v.float().repeat_interleave(rep, 1),
                          cu_q, cu_k, max_q, max_k, causal=causal).to(q.dtype)
        return run

    good = gpu_check.varlen_against_alone(packs, gqa(varlen_sdpa), "cpu", "bfloat16", 0)
    assert good["ok"] and good["examples"] == sum(len(p.cu_seqlens) - 1 for p in packs), good
    bad = gpu_check.varlen_against_alone(packs, gqa(causal_only), "cpu", "bfloat16", 0)
    assert not bad["ok"] and bad["max_diff_vs_alone"] > bad["atol"], bad
    with pytest.raises(gpu_check.UnsupportedBackendError, match="CUDA"):
        gpu_check.loader_flash_attn(packs, "cpu", "bfloat16", 0)
