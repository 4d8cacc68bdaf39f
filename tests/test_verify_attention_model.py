"""`packcli.verify.attention.model`: the tiny model the attention check trains is deterministic by seed and takes
positions explicitly."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from packcli.verify.attention.model import ModelConfig, build_model  # noqa: E402


def test_model_is_deterministic_and_needs_position_ids():
    from packcli.verify.attention.backends import CausalAttention

    cfg = ModelConfig()
    a, b, c = (build_model(cfg, CausalAttention("ref"), seed=s) for s in (0, 0, 1))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.layers[0].q_proj.weight, c.layers[0].q_proj.weight)
    with pytest.raises(TypeError):
        a(torch.zeros(4, dtype=torch.long), cu_seqlens=torch.tensor([0, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelConfig(num_heads=4, num_kv_heads=3)
