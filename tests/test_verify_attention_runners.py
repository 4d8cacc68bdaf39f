"""`packcli.verify.attention.runners`: the Hugging Face runner's calls that put an attention_mask, a KV cache or
the default kwargs beside packed position_ids are each reported leaking."""

from __future__ import annotations

import pytest
from conftest import ATTENTION_HF_TRAPS

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]
torch = pytest.importorskip("torch")

from packcli.verify.attention import TOLERANCES  # noqa: E402


@pytest.mark.parametrize("backend", ATTENTION_HF_TRAPS)
def test_hf_traps_are_reported_leaking(attention_report, backend):
    result = attention_report.result(backend)
    assert not result.ok
    for pack in result.packs:
        assert pack.neighbour.moved
        assert max(pack.logits_max_diff[1:]) > 100 * TOLERANCES["float32"].logits_atol
        assert pack.grad_weight_max_diff > pack.grad_weight_bound
