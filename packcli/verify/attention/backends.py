"""Attention backends, and the one registry of them (names, factories, what each needs to run).

All take q [T, H, D], k/v [T, Hkv, D] and return [T, H, D]. ``naive`` ignores the seams: it is the
negative control, and must be reported as leaking.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from packcli.verify.attention.model import AttentionBackend
from packcli.verify.attention.results import TOLERANCES


def segment_ids(cu_seqlens: Any, total: int) -> Any:
    import torch

    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    return torch.repeat_interleave(torch.arange(len(lengths), device=cu_seqlens.device), lengths, output_size=total)


class CausalAttention:
    """Explicit ``softmax(QK^T / sqrt(d)) V`` in float32, causal over the whole input.

    Fed one example, it is the control's reference; fed a whole pack, it is ``naive``, the
    negative control. Because it holds the probabilities it can measure, per example, how much
    attention mass lands on keys of *other* examples (``records``, one tensor per layer call).
    """

    def __init__(self, name: str, *, record: bool = False) -> None:
        self.name = name
        self.records: list[Any] | None = [] if record else None

    def attend(self, q: Any, k: Any, v: Any, *, cu_seqlens: Any, max_seqlen: int, position_ids: Any) -> Any:
        import torch

        t, h, d = q.shape
        rep = h // k.shape[1]
        qf = q.float().transpose(0, 1)
        kf = k.float().repeat_interleave(rep, dim=1).transpose(0, 1)
        vf = v.float().repeat_interleave(rep, dim=1).transpose(0, 1)
        scores = qf @ kf.transpose(-1, -2) / math.sqrt(d)
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        if self.records is not None:
            seg = segment_ids(cu_seqlens, t)
            cross = (probs * (seg[None, :] != seg[:, None])).sum(-1).mean(0)  # [T]: mean over heads
            per_example = torch.zeros(len(cu_seqlens) - 1, device=q.device).index_add_(0, seg, cross.detach())
            self.records.append(per_example / (cu_seqlens[1:] - cu_seqlens[:-1]).float())
        return (probs @ vf).transpose(0, 1).to(q.dtype)


class SdpaAttention:
    """``scaled_dot_product_attention`` with a dense block-diagonal causal bool mask."""

    name = "sdpa"

    def attend(self, q: Any, k: Any, v: Any, *, cu_seqlens: Any, max_seqlen: int, position_ids: Any) -> Any:
        import torch

        t = q.shape[0]
        seg = segment_ids(cu_seqlens, t)
        mask = (seg[:, None] == seg[None, :]) & torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
            attn_mask=mask[None, None], enable_gqa=True)
        return out[0].transpose(0, 1)


class FlexAttention:
    """FlexAttention with a document mask from ``cu_seqlens``.

    Compiled on CUDA (what trainers run). On CPU it runs uncompiled: torch 2.13's flex has no CPU
    backward (``NotImplementedError: FlexAttention does not support backward on CPU``), so the CPU
    check is forward-only (``check_grads=False``) and says so; and compiled CPU flex was wrong here
    (plain causal mask, T=40: zeros for the first query of the last head, max diff 1.84 vs sdpa;
    a 128-token document mask: InductorError in the C++ compile). Uncompiled, it runs the same
    mask_mod/BlockMask through flex's reference math: it checks the mask, not a fused kernel.
    """

    name = "flex"

    def __init__(self, device_type: str) -> None:
        from torch.nn.attention.flex_attention import flex_attention

        self.compiled = device_type == "cuda"
        if self.compiled:
            import torch

            self._fn = torch.compile(flex_attention)
        else:
            self._fn = flex_attention
        self._masks: dict[tuple[int, ...], Any] = {}

    def attend(self, q: Any, k: Any, v: Any, *, cu_seqlens: Any, max_seqlen: int, position_ids: Any) -> Any:
        from torch.nn.attention.flex_attention import create_block_mask

        t = q.shape[0]
        key = tuple(cu_seqlens.tolist())
        if key not in self._masks:  # one mask per pack, not per layer
            seg = segment_ids(cu_seqlens, t)

            def document_causal(b: Any, h: Any, qi: Any, ki: Any) -> Any:
                return (seg[qi] == seg[ki]) & (qi >= ki)

            self._masks = {key: create_block_mask(document_causal, None, None, t, t, device=q.device)}
        out = self._fn(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                       block_mask=self._masks[key], enable_gqa=True)
        return out[0].transpose(0, 1)


class VarlenAttention:
    """``torch.nn.attention.varlen.varlen_attn`` (flash kernels; causal via window (-1, 0))."""

    name = "torch-varlen"

    def attend(self, q: Any, k: Any, v: Any, *, cu_seqlens: Any, max_seqlen: int, position_ids: Any) -> Any:
        from torch.nn.attention.varlen import varlen_attn

        cu = cu_seqlens.to(torch_int32())
        return varlen_attn(q, k, v, cu, cu, max_seqlen, max_seqlen, window_size=(-1, 0), enable_gqa=True)


class FlashAttnAttention:
    """``flash_attn.flash_attn_varlen_func`` (GQA native)."""

    name = "flash-attn"

    def attend(self, q: Any, k: Any, v: Any, *, cu_seqlens: Any, max_seqlen: int, position_ids: Any) -> Any:
        from flash_attn import flash_attn_varlen_func

        cu = cu_seqlens.to(torch_int32())
        return flash_attn_varlen_func(q, k, v, cu, cu, max_seqlen, max_seqlen, dropout_p=0.0, causal=True)


def torch_int32() -> Any:
    import torch

    return torch.int32


_FACTORIES: dict[str, Callable[[str], AttentionBackend]] = {
    "sdpa": lambda device: SdpaAttention(),
    "flex": lambda device: FlexAttention(device.split(":")[0]),
    "torch-varlen": lambda device: VarlenAttention(),
    "flash-attn": lambda device: FlashAttnAttention(),
    "naive": lambda device: CausalAttention("naive", record=True),
}
CORE_BACKENDS = tuple(_FACTORIES)  # the tiny model's backends, by name; "naive" is the negative control
# hf:<attn_implementation>[+variant]. The variants are the traps users hit with packed inputs.
HF_VARIANTS = {
    "": "use_cache=False, no attention_mask: the documented padding-free call",
    "attention_mask": "an all-ones attention_mask passed with the packed position_ids",
    "cache": "use_cache=True with a fresh DynamicCache passed in",
    "default_kwargs": "only inputs_embeds and position_ids: use_cache falls back to config.use_cache",
    "cu_seqlens": "use_cache=False plus cu_seq_lens_q/k and max_length_q/k flash kwargs",
}
HF_IMPLS = ("eager", "sdpa", "flex_attention", "flash_attention_2")


def make_backend(name: str, device: str) -> AttentionBackend:
    """The backend ``name`` (one of `CORE_BACKENDS`) for ``device``; flash-attn is imported when it runs."""
    return _FACTORIES[name](device)


# Support matrix: decided before any work, every problem reported at once.


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def unsupported_reason(name: str, device: str, dtype: str, check_grads: bool) -> str | None:
    """Why ``name`` cannot run on device/dtype (each fix included), or None if it can."""
    import torch

    cuda, half = device.startswith("cuda"), dtype in ("bfloat16", "float16")
    impl = name[3:].split("+")[0] if name.startswith("hf:") else ""
    reasons = []
    if name in ("torch-varlen", "flash-attn") and not cuda:
        reasons.append("it runs flash kernels, which exist only on CUDA; use `device='cuda'`")
    if (name in ("torch-varlen", "flash-attn") or impl == "flash_attention_2") and not half:
        reasons.append("flash kernels take bfloat16/float16 only; use `dtype='bfloat16'`")
    if name == "torch-varlen" and not _importable("torch.nn.attention.varlen"):
        reasons.append(f"torch {torch.__version__} has no torch.nn.attention.varlen; install torch>=2.10")
    if (name == "flash-attn" or impl == "flash_attention_2") and not _importable("flash_attn"):
        reasons.append("flash_attn is not installed; pip install 'packcli[flash]'")
    if impl == "flash_attention_2" and not cuda:
        reasons.append("flash_attention_2 runs only on CUDA; use `device='cuda'`")
    if impl and not _importable("transformers"):
        reasons.append("transformers is not installed; pip install 'packcli[dev]' (or pip install transformers)")
    if (name == "flex" or impl == "flex_attention") and not cuda and check_grads:
        reasons.append(f"FlexAttention has no CPU backward in torch {torch.__version__}; pass check_grads=False "
                       "(forward-only check) or use `device='cuda'`")
    return "; ".join(reasons) or None


def expand_names(backends: Sequence[str]) -> list[str]:
    names: list[str] = []
    for raw in backends:
        if raw == "hf":
            names += [f"hf:{i}" for i in HF_IMPLS]
        else:
            names.append(raw)
    return list(dict.fromkeys(names))


def validate_names(names: Sequence[str], device: str, dtype: str) -> list[str]:
    problems = []
    if dtype not in TOLERANCES:
        problems.append(f"dtype {dtype!r} is not one of {sorted(TOLERANCES)}")
    if not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        problems.append(f"device {device!r} is not cpu or cuda[:N]")
    for name in names:
        if name.startswith("hf:"):
            impl, _, variant = name[3:].partition("+")
            if impl not in HF_IMPLS or variant not in HF_VARIANTS:
                problems.append(f"unknown backend {name!r}: hf:<{'|'.join(HF_IMPLS)}>"
                                f"[+{'|+'.join(v for v in HF_VARIANTS if v)}]")
        elif name not in CORE_BACKENDS:
            problems.append(f"unknown backend {name!r}; choose from {', '.join(CORE_BACKENDS)}, hf, "
                            "hf:<impl>[+variant]")
    return problems
