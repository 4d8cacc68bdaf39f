"""`packcli.verify.attention.backends`: the seam-aware backends match the control, ``naive`` leaks, a custom backend
plugs in and a one-key leak is caught, and a backend that cannot run here refuses (never a fallback)."""

from __future__ import annotations

import sys

import pytest
from conftest import ATTENTION_CORRECT_HF

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]
torch = pytest.importorskip("torch")

from packcli.verify.attention import TOLERANCES, UnsupportedBackendError, check_packs  # noqa: E402


def test_hf_expansion_runs_cpu_impls_and_lists_the_rest(attention_report):
    names = [r.backend for r in attention_report.results]
    assert set(ATTENTION_CORRECT_HF) <= set(names)
    skipped = dict(attention_report.skipped)
    assert "no CPU backward" in skipped["hf:flex_attention"]  # listed with its reason, not dropped
    assert "only on CUDA" in skipped["hf:flash_attention_2"]
    assert not set(skipped) & set(names)


@pytest.mark.parametrize("backend", ["sdpa", *ATTENTION_CORRECT_HF])
def test_seam_aware_backends_match_the_unpacked_control(attention_report, backend):
    result = attention_report.result(backend)
    tol = TOLERANCES["float32"]
    assert result.ok, result.evidence
    assert result.tolerance == tol and result.reduction == "token_mean" and result.grads_checked
    for pack in result.packs:
        assert max(pack.logits_max_diff) <= tol.logits_atol
        assert pack.loss_mask_mismatches == ()
        assert abs(pack.token_mean_loss[0] - pack.token_mean_loss[1]) <= tol.loss_atol
        assert abs(pack.example_mean_loss[0] - pack.example_mean_loss[1]) <= tol.loss_atol
        assert max(pack.grad_embed_max_diff) <= pack.grad_embed_bound
        assert pack.grad_weight_max_diff <= pack.grad_weight_bound
        # the one-token and all-masked examples have no loss term on either side
        assert all(d is None or d <= tol.loss_atol for d in pack.example_loss_diff)


def test_naive_is_reported_leaking_with_cross_segment_mass(attention_report):
    result = attention_report.result("naive")
    assert not result.ok
    for pack in result.packs:
        assert pack.cross_segment_mass[0] == 0.0  # causal: the first example has nothing before it
        assert min(pack.cross_segment_mass[1:]) > 0.05
        assert max(pack.logits_max_diff[1:]) > 100 * TOLERANCES["float32"].logits_atol
        assert pack.neighbour.moved and not pack.neighbour.bitwise_equal
        assert max(pack.grad_embed_max_diff) > pack.grad_embed_bound
    assert any("attention probability" in e and "other examples" in e for e in result.evidence)
    assert any("logit diff" in e for e in result.evidence)


class PeekBackOne:
    """Lets the first token of every example see the previous example's last token: a one-key leak."""

    name = "peek-back-one"

    def attend(self, q, k, v, *, cu_seqlens, max_seqlen, position_ids):
        t = q.shape[0]
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
        seg = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
        start = cu_seqlens[:-1].long()[seg]
        i = torch.arange(t)
        same = seg[:, None] == seg[None, :]
        peek = (i[:, None] == start[:, None]) & (i[None, :] == start[:, None] - 1)
        mask = (same | peek) & (i[None, :] <= i[:, None])
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
            attn_mask=mask[None, None], enable_gqa=True)
        return out[0].transpose(0, 1)


class PlainSdpa(PeekBackOne):
    name = "my-sdpa"

    def attend(self, q, k, v, *, cu_seqlens, max_seqlen, position_ids):
        from packcli.verify.attention.backends import SdpaAttention

        return SdpaAttention().attend(q, k, v, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen,
                                      position_ids=position_ids)


def test_custom_backends_plug_in_and_a_one_key_leak_is_caught(attention_packs):
    report = check_packs(attention_packs, backends=[PlainSdpa(), PeekBackOne()])
    assert report.result("my-sdpa").ok
    leaky = report.result("peek-back-one")
    assert not leaky.ok and leaky.versions["custom_backend"] == "PeekBackOne"
    for pack in leaky.packs:
        assert pack.logits_max_diff[0] <= TOLERANCES["float32"].logits_atol  # nothing before example 0
        assert min(pack.logits_max_diff[1:]) > 10 * TOLERANCES["float32"].logits_atol
        assert pack.neighbour.moved


def test_flex_runs_forward_only_on_cpu_and_refuses_grads(attention_packs):
    with pytest.raises(UnsupportedBackendError, match=r"'flex'.*device=cpu.*float32.*check_grads=False"):
        check_packs(attention_packs, backends=["flex"])
    result = check_packs(attention_packs[:1], backends=["flex"], check_grads=False).results[0]
    assert result.ok, result.evidence
    assert not result.grads_checked and result.packs[0].grad_embed_max_diff is None
    assert result.versions["flex_compiled"] == "False"


@pytest.mark.parametrize("backend", ["torch-varlen", "flash-attn"])
def test_cuda_only_backends_raise_a_clear_error_on_cpu(attention_packs, backend):
    with pytest.raises(UnsupportedBackendError) as info:
        check_packs(attention_packs, backends=[backend])
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert f"'{backend}'" in message and "device=cpu" in message and "dtype=float32" in message
    assert "`device='cuda'`" in message and "`dtype='bfloat16'`" in message
    if backend == "flash-attn" and "flash_attn" not in sys.modules:
        assert "pip install 'packcli[flash]'" in message
