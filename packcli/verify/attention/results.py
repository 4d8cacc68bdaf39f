"""The attention check's records: the pack it takes, the tolerances it applies, the results it gives."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from packcli.errors import PackcliError
from packcli.verify.attention.model import ModelConfig

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
    grad_rtol: float     # max |g_packed - g_control| <= grad_atol + grad_rtol * max |g_control| over the pack
    grad_atol: float     # the floor of that bound: a control gradient can be exactly 0 (no scale to be relative to)
    rotary_atol: float   # rotary phase (cos, sin) per token
    why: str

    def grad_bound(self, control_scale: float) -> float:
        """The largest gradient difference allowed where the control's largest gradient is ``control_scale``.

        Never a ratio: a pack whose only supervised term is predicted from an example's first token
        (a one-token example, ``lengths=[1, 2]``) has a control q_proj gradient of exactly 0, and the
        packed side's rounding noise over 0 is not a leak.
        """
        return self.grad_atol + self.grad_rtol * control_scale


# Chosen from measurement on CPU with the default ModelConfig: 12 packs of 2-6 examples up to 60
# tokens and 12 packs of 2-5 examples up to 400 tokens (T up to 1364), sdpa / flex / hf:eager /
# hf:sdpa against the control. Each bound is >= 3x the worst correct backend (bf16 loss: 2.5x) and
# >= 6x below the smallest planted leak (naive, hf +attention_mask/+cache: logits >= 2.5, per-token
# loss >= 1.3, relative grad >= 0.59 in every dtype). The gradient floor is the relative bound at a
# control gradient of 0.01 (the smallest non-zero control gradient seen is 0.03; planted leaks move
# gradients by >= 5e-3), measured also with ATEN_CPU_CAPABILITY=default, whose other rounding is what
# turned a zero control gradient into a false alarm. Bigger models accumulate more rounding:
# scripts/gpu_check.py prints the measured diffs next to these bounds.
TOLERANCES = {
    "float32": Tolerance(logits_atol=1e-4, loss_atol=5e-5, grad_rtol=1e-4, grad_atol=1e-6, rotary_atol=1e-6,
                         why="fp32: correct backends measured <= 3.4e-6 logits, <= 2.4e-6 loss, <= 8.6e-7 "
                         "relative grad, rotary phase bitwise equal; leaks >= 0.59. Grad floor 1e-6 (grad_rtol x "
                         "0.01): where the control gradient is 0 (one-token examples) rounding left <= 1.1e-7"),
    "float16": Tolerance(logits_atol=3e-2, loss_atol=2e-2, grad_rtol=1e-2, grad_atol=1e-4, rotary_atol=1e-3,
                         why="fp16: correct backends measured <= 9.3e-3 logits, <= 5.3e-3 loss, <= 3.1e-3 "
                         "relative grad; leaks >= 0.59. Grad floor 1e-4 (grad_rtol x 0.01): where the control "
                         "gradient is 0 rounding left <= 3.3e-8"),
    "bfloat16": Tolerance(logits_atol=2.5e-1, loss_atol=1e-1, grad_rtol=1e-1, grad_atol=1e-3, rotary_atol=1e-2,
                          why="bf16 (8-bit mantissa, eps 7.8e-3, on O(1) logits): correct backends measured "
                          "<= 8.2e-2 logits, <= 4.0e-2 loss, <= 2.0e-2 relative grad; leaks >= 0.59. Grad floor "
                          "1e-3 (grad_rtol x 0.01): where the control gradient is 0 rounding left <= 3.3e-8"),
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
    grad_embed_max_diff: tuple[float, ...] | None  # per example, max |g_packed - g_control|; None: not checked
    grad_embed_bound: float | None                 # Tolerance.grad_bound of the control's input-embedding grads
    grad_weight_max_diff: float | None             # layer-0 q_proj
    grad_weight_bound: float | None
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
