"""Prove, by running a model, that packing changes nothing an example can see or be scored on.

A pack (what a trainer reads from one Parquet row), cu_seqlens = [0, 4, 7, 9]::

    token       0    1    2    3 |   4    5    6 |   7    8
    position    0    1    2    3 |   0    1    2 |   0    1    restart at every seam
    label    -100    a    b    c |-100 -100    f |-100    h    -100 on every first token
                                ^ seam: logits[3] (end of example 0) predict label[4]; -100 drops it

For every backend the same seeded model runs twice: the *control* feeds each example alone with
plain causal attention (positions 0..len-1); the *packed* path feeds the whole pack through the
backend with the pack's own ``cu_seqlens`` and ``position_ids``. Per example we compare logits,
per-token losses (HF shift over the whole pack), per-example and reduced losses, and gradients
w.r.t. input embeddings and layer-0 ``q_proj``. Three built-in controls show the comparison has
teeth: mutating one example must leave the others' logits still; positions that keep counting
across seams must be visible in the rotary phase; a copy of the labels with a supervised seam
label must be caught by the loss comparison. ``naive`` (no seams at all) is the negative control.

Trade-off: a tiny random model, not the user's model: seams are a property of masks, positions and
labels, not of weights, and a tiny model makes the check cheap enough to run in CI on CPU. Backends
live behind ``AttentionBackend``; a combination that cannot run raises, never falls back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from packcli.errors import PackcliError
from packcli.verify.model import AttentionBackend, ModelConfig

__all__ = [
    "IGNORE_INDEX", "PackArrays", "Tolerance", "TOLERANCES", "AttentionReport", "BackendResult",
    "PackResult", "UnsupportedBackendError", "TorchMissingError", "check_packs", "require_torch",
    "CORE_BACKENDS", "HF_VARIANTS",
]

IGNORE_INDEX = -100
CORE_BACKENDS = ("sdpa", "flex", "torch-varlen", "flash-attn", "naive")
# hf:<attn_implementation>[+variant]. The variants are the traps users hit with packed inputs.
HF_VARIANTS = {
    "": "use_cache=False, no attention_mask: the documented padding-free call",
    "attention_mask": "an all-ones attention_mask passed with the packed position_ids",
    "cache": "use_cache=True with a fresh DynamicCache passed in",
    "default_kwargs": "only inputs_embeds and position_ids: use_cache falls back to config.use_cache",
    "cu_seqlens": "use_cache=False plus cu_seq_lens_q/k and max_length_q/k flash kwargs",
}
HF_IMPLS = ("eager", "sdpa", "flex_attention", "flash_attention_2")
Reduction = Literal["token_mean", "example_mean"]


class UnsupportedBackendError(PackcliError, ValueError):
    """A backend/device/dtype combination that cannot run here; the check never substitutes another."""


class TorchMissingError(PackcliError, RuntimeError):
    """torch (or transformers, for hf backends) is not installed."""


def require_torch() -> Any:
    """Import torch or raise the one-line install hint."""
    try:
        import torch
    except ImportError as exc:
        raise TorchMissingError("the attention check needs torch: pip install 'packcli[torch]'") from exc
    return torch


@dataclass(frozen=True)
class PackArrays:
    """One pack as a trainer reads it. ``labels`` are unshifted (HF convention)."""

    input_ids: npt.NDArray[np.int32]
    labels: npt.NDArray[np.int32]
    position_ids: npt.NDArray[np.int32]
    cu_seqlens: npt.NDArray[np.int32]

    def __post_init__(self) -> None:
        t = len(self.input_ids)
        problems = [f"{n} must be 1-D (shape {getattr(self, n).shape})"
                    for n in ("input_ids", "labels", "position_ids", "cu_seqlens") if getattr(self, n).ndim != 1]
        problems += [f"{n} has {len(getattr(self, n))} entries, input_ids has {t}"
                     for n in ("labels", "position_ids") if len(getattr(self, n)) != t]
        cu = np.asarray(self.cu_seqlens)
        if len(cu) < 2 or cu[0] != 0 or cu[-1] != t or np.any(np.diff(cu) <= 0):
            problems.append(f"cu_seqlens must rise strictly from 0 to {t}, got {cu.tolist()[:12]}")
        if t and int(np.min(self.input_ids)) < 0:
            problems.append("input_ids has negative ids")
        if problems:
            raise ValueError("bad PackArrays: " + "; ".join(problems))

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.diff(self.cu_seqlens))


@dataclass(frozen=True)
class Tolerance:
    """Pinned per dtype; ``why`` is written into the report so a reader can challenge it."""

    logits_atol: float   # max |logit diff| per example
    loss_atol: float     # per-token, per-example and reduced loss
    grad_rtol: float     # max |g_packed - g_control| / max |g_control| over the pack
    rotary_atol: float   # rotary phase (cos, sin) per token
    why: str


# Chosen from measurement on CPU with the default ModelConfig: 12 packs of 2-6 examples up to 60
# tokens and 12 packs of 2-5 examples up to 400 tokens (T up to 1364), sdpa / flex / hf:eager /
# hf:sdpa against the control. Each bound is >= 3x the worst correct backend (bf16 loss: 2.5x) and
# >= 6x below the smallest planted leak (naive, hf +attention_mask/+cache: logits >= 2.5, per-token
# loss >= 1.3, relative grad >= 0.59 in every dtype). Bigger models accumulate more rounding:
# scripts/gpu_check.py prints the measured diffs next to these bounds.
TOLERANCES = {
    "float32": Tolerance(1e-4, 5e-5, 1e-4, 1e-6,
                         "fp32: correct backends measured <= 3.4e-6 logits, <= 2.4e-6 loss, <= 8.6e-7 "
                         "relative grad, rotary phase bitwise equal; leaks >= 0.59"),
    "float16": Tolerance(3e-2, 2e-2, 1e-2, 1e-3,
                         "fp16: correct backends measured <= 9.3e-3 logits, <= 5.3e-3 loss, <= 3.1e-3 "
                         "relative grad; leaks >= 0.59"),
    "bfloat16": Tolerance(2.5e-1, 1e-1, 1e-1, 1e-2,
                          "bf16 (8-bit mantissa, eps 7.8e-3, on O(1) logits): correct backends measured "
                          "<= 8.2e-2 logits, <= 4.0e-2 loss, <= 2.0e-2 relative grad; leaks >= 0.59"),
}


@dataclass(frozen=True)
class NeighbourMutation:
    mutated_example: int
    max_logit_diff: float   # over every other example of the pack
    bitwise_equal: bool
    moved: bool             # max_logit_diff > logits_atol


@dataclass(frozen=True)
class RotaryControl:
    """Reset positions must match the control's phase; continued positions must be visible.

    RoPE is relative, so when the mask comes from ``cu_seqlens`` a constant shift of an example's
    positions leaves its logits unchanged up to rounding: ``continued_logits_detected`` is then
    False by physics, and detection rests on the phase. Backends that infer seams from positions
    (HF) lose their seams under continued positions, and the logits show it.
    """

    reset_phase_max_diff: float
    continued_phase_max_diff: float
    continued_detected: bool
    continued_logits_max_diff: float
    continued_logits_detected: bool


@dataclass(frozen=True)
class SeamLabelControl:
    corrupted_seams: int
    extra_loss_terms: int
    token_mean_loss_diff: float
    detected: bool


@dataclass(frozen=True)
class PackResult:
    pack_index: int
    lengths: tuple[int, ...]
    logits_max_diff: tuple[float, ...]
    token_loss_max_diff: float
    loss_mask_mismatches: tuple[int, ...]          # label positions supervised on one side only
    example_loss_diff: tuple[float | None, ...]
    token_mean_loss: tuple[float, float]           # (packed, control)
    example_mean_loss: tuple[float, float]
    grad_embed_rel_diff: tuple[float, ...] | None  # None when grads were not checked
    grad_weight_rel_diff: float | None
    neighbour: NeighbourMutation | None            # None for a one-example pack
    rotary: RotaryControl
    seam_label_control: SeamLabelControl | None
    cross_segment_mass: tuple[float, ...] | None   # measured by backends that expose probabilities
    ok: bool
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class BackendResult:
    backend: str
    ok: bool
    device: str
    dtype: str
    reduction: str
    tolerance: Tolerance
    grads_checked: bool
    token_ids_remapped: bool
    versions: dict[str, str]
    packs: tuple[PackResult, ...]
    evidence: tuple[str, ...]
    seconds: float


@dataclass(frozen=True)
class AttentionReport:
    results: tuple[BackendResult, ...]
    skipped: tuple[tuple[str, str], ...]
    model_config: ModelConfig
    seed: int
    reductions: tuple[str, ...] = ("token_mean", "example_mean")
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    def result(self, backend: str) -> BackendResult:
        for r in self.results:
            if r.backend == backend:
                return r
        raise KeyError(f"no result for backend {backend!r}; have {[r.backend for r in self.results]}")

    def to_dict(self) -> dict[str, Any]:
        return _jsonable({**asdict(self), "ok": self.ok})


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Backends. All take q [T, H, D], k/v [T, Hkv, D] and return [T, H, D].


def _segment_ids(cu_seqlens: Any, total: int) -> Any:
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
            seg = _segment_ids(cu_seqlens, t)
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
        seg = _segment_ids(cu_seqlens, t)
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
            seg = _segment_ids(cu_seqlens, t)

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


# ---------------------------------------------------------------------------------------------
# Support matrix: decided before any work, every problem reported at once.


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _unsupported(name: str, device: str, dtype: str, check_grads: bool) -> str | None:
    """Why ``name`` cannot run on device/dtype (each fix included), or None if it can."""
    import torch

    cuda, half = device.startswith("cuda"), dtype in ("bfloat16", "float16")
    impl = name[3:].split("+")[0] if name.startswith("hf:") else ""
    reasons = []
    if name in ("torch-varlen", "flash-attn") and not cuda:
        reasons.append("it runs flash kernels, which exist only on CUDA; use --device cuda")
    if (name in ("torch-varlen", "flash-attn") or impl == "flash_attention_2") and not half:
        reasons.append("flash kernels take bfloat16/float16 only; use --dtype bfloat16")
    if name == "torch-varlen" and not _importable("torch.nn.attention.varlen"):
        reasons.append(f"torch {torch.__version__} has no torch.nn.attention.varlen; install torch>=2.10")
    if (name == "flash-attn" or impl == "flash_attention_2") and not _importable("flash_attn"):
        reasons.append("flash_attn is not installed; pip install 'packcli[flash]'")
    if impl == "flash_attention_2" and not cuda:
        reasons.append("flash_attention_2 runs only on CUDA; use --device cuda")
    if impl and not _importable("transformers"):
        reasons.append("transformers is not installed; pip install 'packcli[dev]' (or pip install transformers)")
    if (name == "flex" or impl == "flex_attention") and not cuda and check_grads:
        reasons.append(f"FlexAttention has no CPU backward in torch {torch.__version__}; pass check_grads=False "
                       "(forward-only check) or use --device cuda")
    return "; ".join(reasons) or None


def _expand(backends: Sequence[str]) -> list[str]:
    names: list[str] = []
    for raw in backends:
        if raw == "hf":
            names += [f"hf:{i}" for i in HF_IMPLS]
        else:
            names.append(raw)
    return list(dict.fromkeys(names))


def _validate(names: Sequence[str], device: str, dtype: str) -> list[str]:
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


# ---------------------------------------------------------------------------------------------
# Runners: one model + one way of calling it. The control call is always the clean one.


class _TinyRunner:
    """``packcli.verify.model`` with a pluggable backend; the control uses ``CausalAttention``."""

    def __init__(self, model: Any, backend: Any) -> None:
        self.model, self.backend = model, backend
        self.reference = CausalAttention("reference")
        self.control_key = "tiny"
        self.vocab_size = model.config.vocab_size
        self.rotary_module = model.rotary

    def embed(self, ids: Any) -> Any:
        return self.model.embed_tokens(ids)

    def packed(self, embeds: Any, position_ids: Any, cu_seqlens: Any, max_seqlen: int) -> Any:
        return self.model(inputs_embeds=embeds, position_ids=position_ids, cu_seqlens=cu_seqlens,
                          max_seqlen=max_seqlen, attention=self.backend)

    def control(self, embeds: Any, position_ids: Any) -> Any:
        import torch

        cu = torch.tensor([0, embeds.shape[0]], dtype=torch.int32, device=embeds.device)
        return self.model(inputs_embeds=embeds, position_ids=position_ids, cu_seqlens=cu,
                          max_seqlen=embeds.shape[0], attention=self.reference)

    def probe_weight(self) -> Any:
        return self.model.probe_weight()

    def start_recording(self) -> None:
        if getattr(self.backend, "records", None) is not None:
            self.backend.records.clear()

    def cross_mass(self) -> tuple[float, ...] | None:
        records = getattr(self.backend, "records", None)
        if not records:
            return None
        import torch

        return tuple(float(x) for x in torch.stack(records).mean(0))


class _HfRunner:
    """A ``transformers`` causal LM fed one packed row ``[1, T]``, called the way ``variant`` says."""

    def __init__(self, model: Any, impl: str, variant: str) -> None:
        import inspect

        self.model, self.impl, self.variant = model, impl, variant
        self.control_key = f"hf:{impl}"
        self.vocab_size = model.config.vocab_size
        self.rotary_module = model.model.rotary_emb
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"  # renamed in 5.x

    def embed(self, ids: Any) -> Any:
        return self.model.get_input_embeddings()(ids)

    def packed(self, embeds: Any, position_ids: Any, cu_seqlens: Any, max_seqlen: int) -> Any:
        import torch

        kwargs: dict[str, Any] = {"inputs_embeds": embeds[None], "position_ids": position_ids[None]}
        if self.variant != "default_kwargs":
            kwargs["use_cache"] = self.variant == "cache"
        if self.variant == "attention_mask":
            kwargs["attention_mask"] = torch.ones(1, embeds.shape[0], dtype=torch.long, device=embeds.device)
        if self.variant == "cache":
            from transformers.cache_utils import DynamicCache

            kwargs[self._cache_kwarg] = DynamicCache(config=self.model.config)
        if self.variant == "cu_seqlens":
            cu = cu_seqlens.to(torch.int32)
            kwargs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max_seqlen, max_length_k=max_seqlen)
        return self.model(**kwargs).logits[0]

    def control(self, embeds: Any, position_ids: Any) -> Any:
        return self.model(inputs_embeds=embeds[None], position_ids=position_ids[None], use_cache=False).logits[0]

    def probe_weight(self) -> Any:
        return self.model.model.layers[0].self_attn.q_proj.weight

    def start_recording(self) -> None:
        pass

    def cross_mass(self) -> None:
        return None  # fused kernels do not expose probabilities


# ---------------------------------------------------------------------------------------------
# Losses in pack coordinates: entry t-1 is the term that predicts label[t] (t = 1..T-1).


def _token_losses(logits: Any, labels: Any) -> tuple[Any, Any]:
    """HF shift: ``logits[:-1]`` predict ``labels[1:]``; -100 terms are zero and masked out."""
    import torch

    target = labels[1:]
    mask = target != IGNORE_INDEX
    loss = torch.nn.functional.cross_entropy(logits[:-1].float(), target.clamp_min(0), reduction="none")
    return loss * mask, mask


def _term_weights(mask: Any, term_seg: Any, n: int, reduction: Reduction) -> Any:
    """Per-term weights of the reduced loss, so the packed and control sides normalise alike."""
    import torch

    m = mask.float()
    if reduction == "token_mean":
        return m / m.sum().clamp_min(1.0)
    counts = torch.zeros(n, device=m.device).index_add_(0, term_seg, m)
    return m / (counts[term_seg].clamp_min(1.0) * (counts > 0).sum().clamp_min(1))


def _reduce(loss: Any, mask: Any, term_seg: Any, n: int) -> tuple[Any, float, float]:
    """Per-example means (NaN where unsupervised), token-mean, mean of per-example means."""
    import torch

    m = mask.float()
    sums = torch.zeros(n, device=m.device).index_add_(0, term_seg, loss.detach().float() * m)
    counts = torch.zeros(n, device=m.device).index_add_(0, term_seg, m)
    per_example = sums / counts  # 0/0 = NaN: no supervised token
    token_mean = float(sums.sum() / counts.sum()) if counts.sum() > 0 else float("nan")
    present = per_example[counts > 0]
    return per_example, token_mean, float(present.mean()) if len(present) else float("nan")


@dataclass
class _Tensors:
    ids: Any
    labels: Any
    pos: Any
    cu: Any
    max_seqlen: int
    seg: Any
    spans: list[tuple[int, int]]


@dataclass
class _Control:
    logits: Any
    loss: Any
    mask: Any
    phase: Any
    grad_embed: Any | None
    grad_weight: Any | None


def _capture_phase(module: Any, store: list[Any]) -> Any:
    import torch

    def hook(_m: Any, _inputs: Any, output: Any) -> None:
        cos, sin = output
        store.append(torch.cat([cos, sin], -1).reshape(-1, cos.shape[-1] * 2).detach().float())

    return module.register_forward_hook(hook)


def _run_control(runner: Any, p: _Tensors, reduction: Reduction, grads: bool) -> _Control:
    """Each example alone, positions 0..len-1, labels = its slice; grads with pack normalisation."""
    import torch

    t, n = p.ids.shape[0], len(p.spans)
    mask = torch.zeros(t - 1, dtype=torch.bool, device=p.ids.device)
    for s, e in p.spans:  # no term predicts an example's first label: that is the control's point
        mask[s:e - 1] = p.labels[s + 1:e] != IGNORE_INDEX
    weights = _term_weights(mask, p.seg[1:], n, reduction)
    logits, losses, phases, g_embed = [], torch.zeros(t - 1, device=p.ids.device), [], []
    weight = runner.probe_weight()
    g_weight = torch.zeros_like(weight, dtype=torch.float32) if grads else None
    for s, e in p.spans:
        with torch.set_grad_enabled(grads):
            emb = runner.embed(p.ids[s:e]).detach().requires_grad_(grads)
            hook = _capture_phase(runner.rotary_module, phases)
            try:
                out = runner.control(emb, torch.arange(e - s, device=p.ids.device))
            finally:
                hook.remove()
            loss, _ = _token_losses(out, p.labels[s:e])
            if grads:
                ge, gw = torch.autograd.grad((loss * weights[s:e - 1]).sum(), [emb, weight], allow_unused=True)
                g_embed.append(torch.zeros_like(emb) if ge is None else ge)
                if gw is not None:
                    g_weight += gw.float()
        logits.append(out.detach().float())
        losses[s:e - 1] = loss.detach()
    return _Control(torch.cat(logits), losses, mask, torch.cat(phases),
                    torch.cat(g_embed).float() if grads else None, g_weight)


def _rel(diff: Any, ref: Any) -> float:
    den = float(ref.abs().max()) if ref.numel() else 0.0
    num = float(diff.abs().max()) if diff.numel() else 0.0
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def _per_example_max(a: Any, b: Any, spans: list[tuple[int, int]]) -> list[float]:
    return [float((a[s:e] - b[s:e]).abs().max()) for s, e in spans]


def _check_pack(runner: Any, ctrl: _Control, p: _Tensors, index: int, tol: Tolerance, reduction: Reduction,
                grads: bool, seed: int) -> PackResult:
    """Packed path vs control for one pack, plus the three controls that show the check can fail."""
    import torch

    t, n, spans = p.ids.shape[0], len(p.spans), p.spans
    term_seg, ev = p.seg[1:], []
    with torch.set_grad_enabled(grads):
        emb = runner.embed(p.ids).detach().requires_grad_(grads)
        phases: list[Any] = []
        hook = _capture_phase(runner.rotary_module, phases)
        runner.start_recording()
        try:
            logits = runner.packed(emb, p.pos, p.cu, p.max_seqlen)
        finally:
            hook.remove()
        mass = runner.cross_mass()
        loss, mask = _token_losses(logits, p.labels)
        if grads:
            weights = _term_weights(mask, term_seg, n, reduction)
            g_embed, g_weight = torch.autograd.grad((loss * weights).sum(), [emb, runner.probe_weight()],
                                                    allow_unused=True)
    logits, loss = logits.detach().float(), loss.detach()

    logit_diffs = _per_example_max(logits, ctrl.logits, spans)
    ev += [f"example {j} (tokens {s}:{e}): max |logit diff| {d:.3g} > {tol.logits_atol:g}"
           for j, ((s, e), d) in enumerate(zip(spans, logit_diffs)) if d > tol.logits_atol]

    seam_starts = {s for s, _ in spans[1:]}
    mismatches = [int(i) + 1 for i in (mask != ctrl.mask).nonzero().flatten().tolist()]
    for pos in mismatches[:5]:
        ev.append(f"label at token {pos} (first token of example {int(p.seg[pos])}) is supervised: the packed "
                  f"loss predicts it from the previous example's last token; set labels[{pos}] = -100"
                  if pos in seam_starts else f"label at token {pos}: supervised on one side only")
    both = mask & ctrl.mask
    token_loss_diff = float((loss - ctrl.loss)[both].abs().max()) if both.any() else 0.0
    if token_loss_diff > tol.loss_atol:
        ev.append(f"per-token loss differs by {token_loss_diff:.3g} > {tol.loss_atol:g}")
    pe_p, tm_p, em_p = _reduce(loss, mask, term_seg, n)
    pe_c, tm_c, em_c = _reduce(ctrl.loss, ctrl.mask, term_seg, n)
    ex_diffs: list[float | None] = []
    for a, b in zip(pe_p.tolist(), pe_c.tolist()):
        ex_diffs.append(None if math.isnan(a) and math.isnan(b)
                        else float("inf") if math.isnan(a) or math.isnan(b) else abs(a - b))
    ev += [f"example {j}: loss differs by {d:.3g}" for j, d in enumerate(ex_diffs)
           if d is not None and d > tol.loss_atol]
    for label, a, b in (("token_mean", tm_p, tm_c), ("example_mean", em_p, em_c)):
        if not (math.isnan(a) and math.isnan(b)) and not abs(a - b) <= tol.loss_atol:
            ev.append(f"{label} loss: packed {a:.6g} vs control {b:.6g}")

    g_embed_rel: tuple[float, ...] | None = None
    g_weight_rel: float | None = None
    if grads:
        ge = torch.zeros_like(emb) if g_embed is None else g_embed
        diff = ge.float() - ctrl.grad_embed
        g_embed_rel = tuple(_rel(diff[s:e], ctrl.grad_embed) for s, e in spans)
        ev += [f"example {j}: input-embedding grad differs by {r:.3g} (relative) > {tol.grad_rtol:g}"
               for j, r in enumerate(g_embed_rel) if r > tol.grad_rtol]
        gw = torch.zeros_like(ctrl.grad_weight) if g_weight is None else g_weight.float()
        g_weight_rel = _rel(gw - ctrl.grad_weight, ctrl.grad_weight)
        if g_weight_rel > tol.grad_rtol:
            ev.append(f"layer-0 q_proj grad differs by {g_weight_rel:.3g} (relative) > {tol.grad_rtol:g}")

    with torch.no_grad():
        baseline = runner.packed(runner.embed(p.ids), p.pos, p.cu, p.max_seqlen).float()
        neighbour = None
        if n >= 2:  # mutate example 0: under a causal leak every later example would see it
            s0, e0 = spans[0]
            gen = torch.Generator().manual_seed(seed + index)
            shift = torch.randint(1, runner.vocab_size, (e0 - s0,), generator=gen)
            ids2 = p.ids.clone()
            ids2[s0:e0] = (ids2[s0:e0] + shift.to(p.ids.device)) % runner.vocab_size
            mutated = runner.packed(runner.embed(ids2), p.pos, p.cu, p.max_seqlen).float()
            moved = float((mutated[e0:] - baseline[e0:]).abs().max())
            bitwise = bool(torch.equal(mutated[e0:], baseline[e0:]))
            neighbour = NeighbourMutation(0, moved, bitwise, moved > tol.logits_atol)
            if neighbour.moved:
                ev.append(f"changing example 0's tokens moved other examples' logits by {moved:.3g}")

        cont_phases: list[Any] = []
        hook = _capture_phase(runner.rotary_module, cont_phases)
        try:
            counting = torch.arange(t, device=p.ids.device)  # 0..T-1: positions never restart
            continued = runner.packed(runner.embed(p.ids), counting, p.cu, p.max_seqlen).float()
        finally:
            hook.remove()
    reset_phase = float((phases[-1] - ctrl.phase).abs().max())
    cont_phase = float((cont_phases[-1] - ctrl.phase).abs().max())
    cont_logits = max(_per_example_max(continued, ctrl.logits, spans))
    rotary = RotaryControl(reset_phase, cont_phase, cont_phase > tol.rotary_atol, cont_logits,
                           cont_logits > tol.logits_atol)
    if reset_phase > tol.rotary_atol:
        ev.append(f"rotary phase differs from positions 0..len-1 by {reset_phase:.3g}: position_ids do not restart "
                  "at every seam, or the model ignores them")
    if n >= 2 and not rotary.continued_detected:
        ev.append("positions continued across seams were invisible to the rotary probe: the model ignores position_ids")

    seam_control = None
    if n >= 2:  # a copy of the labels with every seam label supervised must be caught
        seams = torch.tensor(sorted(seam_starts), device=p.ids.device)
        bad = p.labels.clone()
        bad[seams] = p.ids[seams]
        bad_loss, bad_mask = _token_losses(logits, bad)
        _, tm_bad, _ = _reduce(bad_loss, bad_mask, term_seg, n)
        extra = int((bad_mask & ~ctrl.mask).sum())
        seam_control = SeamLabelControl(len(seams), extra, abs(tm_bad - tm_c), extra > 0)
        if not seam_control.detected:
            ev.append("the loss comparison missed a deliberately supervised seam label")

    if mass is not None:
        ev += [f"example {j}: {m:.3g} of its attention probability (mean over layers, heads, queries) "
               f"lands on keys of other examples" for j, m in enumerate(mass) if m > 0]
    return PackResult(index, tuple(e - s for s, e in spans), tuple(logit_diffs), token_loss_diff, tuple(mismatches),
                      tuple(ex_diffs), (tm_p, tm_c), (em_p, em_c), g_embed_rel, g_weight_rel, neighbour, rotary,
                      seam_control, mass, not ev, tuple(f"pack {index}: {e}" for e in ev))


def _to_tensors(pack: PackArrays, vocab_size: int, device: str) -> tuple[_Tensors, bool]:
    import torch

    ids = np.array(pack.input_ids, dtype=np.int64)
    labels = np.array(pack.labels, dtype=np.int64)
    remapped = bool(ids.max() >= vocab_size) or bool(labels.max() >= vocab_size)
    if remapped:  # token identity is irrelevant to seams; the label == input_id relation survives
        ids = ids % vocab_size
        labels = np.where(labels == IGNORE_INDEX, IGNORE_INDEX, labels % vocab_size)
    cu = torch.as_tensor(np.array(pack.cu_seqlens, dtype=np.int32), device=device)  # copy: Arrow arrays are read-only
    spans = [(int(a), int(b)) for a, b in zip(pack.cu_seqlens[:-1], pack.cu_seqlens[1:])]
    return _Tensors(torch.as_tensor(ids, device=device), torch.as_tensor(labels, device=device),
                    torch.as_tensor(np.array(pack.position_ids, dtype=np.int64), device=device), cu,
                    max(b - a for a, b in spans), _segment_ids(cu, len(ids)), spans), remapped


def _versions(name: str, device: str, runner: Any) -> dict[str, str]:
    import torch

    v = {"torch": torch.__version__, "numpy": np.__version__}
    if device.startswith("cuda"):
        v.update(cuda=str(torch.version.cuda), gpu=torch.cuda.get_device_name(torch.device(device)),
                 float32_matmul_precision=torch.get_float32_matmul_precision())  # "high" = TF32
    if name.startswith("hf:"):
        import transformers

        v.update(transformers=transformers.__version__, model=type(runner.model).__name__,
                 attn_implementation=str(runner.model.config._attn_implementation))
    if name == "flash-attn":
        import flash_attn

        v["flash_attn"] = flash_attn.__version__
    if name == "flex":
        v["flex_compiled"] = str(runner.backend.compiled)
    if name not in CORE_BACKENDS and not name.startswith("hf:"):
        v["custom_backend"] = type(runner.backend).__qualname__
    return v


def _make_backend(name: str, device: str) -> Any:
    if name == "naive":
        return CausalAttention("naive", record=True)
    if name == "sdpa":
        return SdpaAttention()
    if name == "flex":
        return FlexAttention(device.split(":")[0])
    if name == "torch-varlen":
        return VarlenAttention()
    return FlashAttnAttention()


def check_packs(packs: Sequence[PackArrays], *, backends: Sequence[str | AttentionBackend], device: str = "cpu",
                dtype: str = "float32", seed: int = 0, model_config: ModelConfig | None = None,
                reduction: Reduction = "token_mean", check_grads: bool = True) -> AttentionReport:
    """Run every backend on every pack and compare against the unpacked control.

    Args:
        packs: packs with at least one seam among them.
        backends: names from ``CORE_BACKENDS``, ``hf`` (every HF implementation runnable here), or
            ``hf:<impl>[+variant]`` (see ``HF_VARIANTS``); or your own ``AttentionBackend`` objects,
            run inside the tiny model under their ``name``.
        device, dtype: where and in what precision both sides run (``TOLERANCES`` keys).
        seed: model init and neighbour-mutation seed.
        model_config: sizes of the tiny model (and of the HF models); default ``ModelConfig()``.
        reduction: the loss whose gradients are compared; both reductions' values are reported.
        check_grads: compare gradients. Backends without a backward here (flex on CPU) need False.

    Returns:
        An ``AttentionReport``; ``report.ok`` is False if any backend leaked or differed.

    Raises:
        UnsupportedBackendError: an unknown name or a backend/device/dtype that cannot run here.
        TorchMissingError: torch is not installed.
        ValueError: no packs, or no pack with a seam.
    """
    torch = require_torch()
    if not packs or not any(len(p.cu_seqlens) > 2 for p in packs):
        raise ValueError("the attention check needs at least one pack with two or more examples (a seam)")
    cfg = model_config or ModelConfig()
    custom = {b.name: b for b in backends if not isinstance(b, str)}
    named = [b for b in backends if isinstance(b, str)]
    names = _expand(named)
    problems = _validate(names, device, dtype)
    problems += [f"custom backend name {n!r} clashes with a built-in backend name" for n in custom
                 if n in CORE_BACKENDS or n.startswith("hf")]
    if reduction not in ("token_mean", "example_mean"):
        problems.append(f"reduction {reduction!r} is not token_mean or example_mean")
    if not problems and device.startswith("cuda") and not torch.cuda.is_available():
        problems.append(f"device {device!r} requested but torch {torch.__version__} sees no CUDA device; "
                        "use --device cpu")
    skipped: list[tuple[str, str]] = []
    if not problems:
        for name in list(names):
            reason = _unsupported(name, device, dtype, check_grads)
            if reason and "hf" in named and name.startswith("hf:") and name not in named:
                skipped.append((name, reason))  # expanded from bare "hf": listed, not silently dropped
                names.remove(name)
            elif reason:
                problems.append(f"backend {name!r} cannot run on device={device} dtype={dtype}: {reason}")
    if problems:
        raise UnsupportedBackendError("; ".join(problems), "run `packcli verify --help` for the backend matrix")

    torch_dtype = getattr(torch, dtype)
    tol = TOLERANCES[dtype]
    tensors = [_to_tensors(p, cfg.vocab_size, device) for p in packs]
    controls: dict[tuple[str, int], _Control] = {}
    models: dict[str, Any] = {}
    results = []
    for name in names + list(custom):
        started = time.perf_counter()
        if name.startswith("hf:"):
            from packcli.verify.model import build_hf_model

            impl, _, variant = name[3:].partition("+")
            if impl not in models:
                longest = max(len(p.input_ids) for p in packs)
                models[impl] = build_hf_model(cfg, impl, seed=seed, max_positions=max(4096, 2 * longest)).to(
                    device=device, dtype=torch_dtype)
            runner: Any = _HfRunner(models[impl], impl, variant)
        else:
            from packcli.verify.model import build_model

            if "tiny" not in models:
                models["tiny"] = build_model(cfg, CausalAttention("reference"), seed=seed).to(
                    device=device, dtype=torch_dtype)
            runner = _TinyRunner(models["tiny"], custom.get(name) or _make_backend(name, device))
        pack_results = []
        for i, (p, _) in enumerate(tensors):
            key = (runner.control_key, i)
            if key not in controls:
                controls[key] = _run_control(runner, p, reduction, check_grads)
            pack_results.append(_check_pack(runner, controls[key], p, i, tol, reduction, check_grads, seed))
        evidence = tuple(e for r in pack_results for e in r.evidence)
        results.append(BackendResult(name, not evidence, device, dtype, reduction, tol, check_grads,
                                     any(r for _, r in tensors), _versions(name, device, runner),
                                     tuple(pack_results), evidence, time.perf_counter() - started))
    notes = ("continued positions: RoPE is relative, so with cu_seqlens masking they change logits only by "
             "rounding; detection is by rotary phase, and by logits where seams are inferred from positions",)
    return AttentionReport(tuple(results), tuple(skipped), cfg, seed, notes=notes)
