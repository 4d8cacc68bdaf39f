"""A tiny deterministic decoder-only transformer whose attention is a plug-in.

The attention check (`packcli.verify.attention`) needs a model that is small enough to run on a
laptop CPU in a test, deterministic (seeded init, no dropout), and shaped like the models people
actually fine-tune, so that whatever crosses a seam in a real model crosses it here too:

* RoPE applied from explicit ``position_ids`` (never an implicit ``arange``), configurable theta;
* grouped-query attention (``num_kv_heads`` < ``num_heads``);
* RMSNorm, SwiGLU MLP, pre-norm residual blocks, untied LM head.

Everything runs on one packed sequence in the *varlen* layout ``[T, heads, head_dim]`` (no batch
axis): that is the layout flash-attn and ``torch.nn.attention.varlen`` consume, so a backend never
reshapes behind the check's back. The model never masks anything itself: the seam handling is the
attention backend's whole job, and the check compares backends against an unpacked control.

Trade-off: hand-written instead of a ``transformers`` class so the core check has no transformers
dependency and every position/mask input is visible; the ``hf`` backends cover real HF classes.
torch is imported inside functions (``import packcli`` stays fast and torch stays optional).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

__all__ = ["ModelConfig", "AttentionBackend", "build_model", "build_hf_model", "rotary_cos_sin"]


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the tiny decoder. Defaults are test-sized; a benchmark can scale every field.

    Attributes:
        vocab_size: token ids must be below this (the check remaps larger ids modulo this).
        hidden_size: model width; must be ``num_heads * head_dim`` with an even head_dim (RoPE).
        num_heads: query heads.
        num_kv_heads: key/value heads; divides ``num_heads`` (GQA).
        num_layers: decoder blocks.
        intermediate_size: SwiGLU width.
        rope_theta: RoPE base.
        rms_norm_eps: RMSNorm epsilon.
    """

    vocab_size: int = 64
    hidden_size: int = 32
    num_heads: int = 4
    num_kv_heads: int = 2
    num_layers: int = 2
    intermediate_size: int = 64
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        problems = []
        for name in ("vocab_size", "hidden_size", "num_heads", "num_kv_heads", "num_layers",
                     "intermediate_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} must be >= 1")
        if self.num_heads >= 1 and self.hidden_size % self.num_heads:
            problems.append(f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}")
        elif self.num_heads >= 1 and (self.hidden_size // self.num_heads) % 2:
            problems.append(f"head_dim={self.hidden_size // self.num_heads} must be even for RoPE")
        if self.num_kv_heads >= 1 and self.num_heads % self.num_kv_heads:
            problems.append(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        if self.rope_theta <= 1.0:
            problems.append(f"rope_theta={self.rope_theta} must be > 1")
        if problems:
            raise ValueError("invalid ModelConfig: " + "; ".join(problems))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


class AttentionBackend(Protocol):
    """One attention implementation, seen from inside a decoder layer.

    ``q`` is ``[T, num_heads, head_dim]``; ``k`` and ``v`` are ``[T, num_kv_heads, head_dim]`` and
    already rotated. The backend returns ``[T, num_heads, head_dim]`` and must keep every query
    inside its own segment ``cu_seqlens[j]:cu_seqlens[j+1]``, causally. ``position_ids`` is passed
    because some real backends infer seams from it (HF flash-attention does); a backend that masks
    by ``cu_seqlens`` may ignore it.
    """

    name: str

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, cu_seqlens: torch.Tensor,
               max_seqlen: int, position_ids: torch.Tensor) -> torch.Tensor: ...


def rotary_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE phases for explicit positions, computed in float32 like HF does (bf16 angles would
    round away the low bits of large positions). Returns ``cos, sin`` of shape ``[T, head_dim]``."""
    import torch

    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32,
                                             device=position_ids.device) / head_dim))
    angles = position_ids.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    import torch

    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def build_model(config: ModelConfig, attention: AttentionBackend, *, seed: int = 0) -> Any:
    """Build the tiny decoder with weights drawn from a private generator seeded by ``seed``.

    The global torch RNG is left untouched, so building a model never changes what a caller's
    later ``torch.randn`` returns. Init scales keep activations O(1) (``N(0, 1/fan_in)`` for
    projections, ``N(0, 1)`` for embeddings): with the usual 0.02 init a tiny model's attention is
    almost uniform and logits almost zero, which would make every tolerance look generous.

    Args:
        config: sizes.
        attention: the default backend; ``forward(..., attention=...)`` can override it per call.
        seed: init seed.

    Returns:
        A ``torch.nn.Module`` (``TinyDecoder``) in eval mode, float32, on CPU.

    Raises:
        ImportError: torch is not installed (``check_packs`` turns that into ``TorchMissingError``
            before it gets here).
    """
    import torch
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self, dim: int, eps: float) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
            self.eps = eps

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # Normalise in float32 (bf16 variance is too coarse), cast back: HF convention.
            xf = x.float()
            xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * xf.to(x.dtype)

    class Rotary(nn.Module):
        """A module only so a forward hook can capture the phase actually used in a forward."""

        def forward(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return rotary_cos_sin(position_ids, config.head_dim, config.rope_theta)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h, d, kvh = config.hidden_size, config.head_dim, config.num_kv_heads
            self.attn_norm = RMSNorm(h, config.rms_norm_eps)
            self.q_proj = nn.Linear(h, config.num_heads * d, bias=False)
            self.k_proj = nn.Linear(h, kvh * d, bias=False)
            self.v_proj = nn.Linear(h, kvh * d, bias=False)
            self.o_proj = nn.Linear(config.num_heads * d, h, bias=False)
            self.mlp_norm = RMSNorm(h, config.rms_norm_eps)
            self.gate_proj = nn.Linear(h, config.intermediate_size, bias=False)
            self.up_proj = nn.Linear(h, config.intermediate_size, bias=False)
            self.down_proj = nn.Linear(config.intermediate_size, h, bias=False)

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    attention: AttentionBackend, cu_seqlens: torch.Tensor, max_seqlen: int,
                    position_ids: torch.Tensor) -> torch.Tensor:
            t, d = x.shape[0], config.head_dim
            hx = self.attn_norm(x)
            q = self.q_proj(hx).view(t, config.num_heads, d)
            k = self.k_proj(hx).view(t, config.num_kv_heads, d)
            v = self.v_proj(hx).view(t, config.num_kv_heads, d)
            c, s = cos[:, None, :].to(q.dtype), sin[:, None, :].to(q.dtype)
            q, k = q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s
            out = attention.attend(q, k, v, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen,
                                   position_ids=position_ids)
            x = x + self.o_proj(out.reshape(t, config.num_heads * d))
            hx = self.mlp_norm(x)
            return x + self.down_proj(nn.functional.silu(self.gate_proj(hx)) * self.up_proj(hx))

    class TinyDecoder(nn.Module):
        """Embedding -> blocks -> RMSNorm -> LM head, over one packed sequence ``[T]``."""

        def __init__(self) -> None:
            super().__init__()
            self.config = config
            self.attention = attention
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
            self.rotary = Rotary()
            self.layers = nn.ModuleList(Block() for _ in range(config.num_layers))
            self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

        def forward(self, input_ids: torch.Tensor | None = None, *,
                    inputs_embeds: torch.Tensor | None = None, position_ids: torch.Tensor,
                    cu_seqlens: torch.Tensor, max_seqlen: int | None = None,
                    attention: AttentionBackend | None = None) -> torch.Tensor:
            """Logits ``[T, vocab]`` for one packed sequence.

            ``position_ids`` is required on purpose: a model that silently used ``arange(T)``
            would hide the most common packing bug (positions that never restart).
            """
            if (input_ids is None) == (inputs_embeds is None):
                raise ValueError("pass exactly one of input_ids or inputs_embeds")
            x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
            if position_ids.shape[0] != x.shape[0]:
                raise ValueError(f"position_ids has {position_ids.shape[0]} entries for {x.shape[0]} tokens")
            if max_seqlen is None:
                max_seqlen = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
            backend = attention if attention is not None else self.attention
            cos, sin = self.rotary(position_ids)
            for block in self.layers:
                x = block(x, cos, sin, backend, cu_seqlens, max_seqlen, position_ids)
            return self.lm_head(self.norm(x))

        def probe_weight(self) -> torch.Tensor:
            """The weight whose gradient the check compares: layer 0 ``q_proj``."""
            return self.layers[0].q_proj.weight

    generator = torch.Generator().manual_seed(seed)
    model = TinyDecoder()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                continue  # RMSNorm gains stay 1
            fan_in = 1 if name == "embed_tokens.weight" else param.shape[1]
            param.copy_(torch.randn(param.shape, generator=generator) / math.sqrt(fan_in))
    return model.eval()


def build_hf_model(config: ModelConfig, attn_implementation: str, *, seed: int = 0,
                   max_positions: int = 4096) -> Any:
    """A real ``LlamaForCausalLM`` with the same sizes, random weights, nothing downloaded.

    Built from a config object (never ``from_pretrained``) under a forked RNG seeded with ``seed``,
    so every ``attn_implementation`` gets identical weights and the caller's RNG is untouched.
    ``initializer_range`` is ``1/sqrt(hidden)`` rather than HF's 0.02 for the reason given in
    ``build_model``. ``config.use_cache`` keeps HF's default (True): that default is one of the
    traps the check exposes.

    Raises:
        ImportError: transformers is not installed.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_config = LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        rope_theta=config.rope_theta, rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=max_positions, attention_dropout=0.0, tie_word_embeddings=False,
        initializer_range=1.0 / math.sqrt(config.hidden_size), attn_implementation=attn_implementation)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(hf_config)
    return model.eval()
