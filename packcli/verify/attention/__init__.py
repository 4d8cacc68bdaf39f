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

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from packcli.contract import IGNORE_INDEX
from packcli.verify.attention.backends import (
    CORE_BACKENDS,
    HF_VARIANTS,
    CausalAttention,
    expand_names,
    make_backend,
    unsupported_reason,
    validate_names,
)
from packcli.verify.attention.compare import Control, check_pack, run_control, to_tensors
from packcli.verify.attention.model import AttentionBackend, ModelConfig
from packcli.verify.attention.results import (
    TOLERANCES,
    AttentionReport,
    BackendResult,
    PackArrays,
    PackResult,
    Reduction,
    Tolerance,
    TorchMissingError,
    UnsupportedBackendError,
    require_torch,
)
from packcli.verify.attention.runners import HfRunner, TinyRunner

__all__ = [
    "IGNORE_INDEX", "PackArrays", "Tolerance", "TOLERANCES", "AttentionReport", "BackendResult",
    "PackResult", "UnsupportedBackendError", "TorchMissingError", "check_packs", "require_torch",
    "CORE_BACKENDS", "HF_VARIANTS", "resolve_backends",
]


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


def resolve_backends(backends: Sequence[str | AttentionBackend], *, device: str = "cpu", dtype: str = "float32",
                     reduction: Reduction = "token_mean", check_grads: bool = True
                     ) -> tuple[list[str], dict[str, AttentionBackend], list[tuple[str, str]]]:
    """Check a backend request before anything runs (``packcli verify`` calls it before verifying).

    Returns:
        The built-in names to run, the custom backends by name, and the ``hf`` expansions skipped here
        with their reasons.

    Raises:
        UnsupportedBackendError: every unknown name and impossible backend/device/dtype, at once.
        TorchMissingError: torch is not installed.
    """
    torch = require_torch()
    custom = {b.name: b for b in backends if not isinstance(b, str)}
    named = [b for b in backends if isinstance(b, str)]
    names = expand_names(named)
    problems = validate_names(names, device, dtype)
    problems += [f"custom backend name {n!r} clashes with a built-in backend name" for n in custom
                 if n in CORE_BACKENDS or n.startswith("hf")]
    if not names and not custom:
        problems.append("no backend named")
    if reduction not in ("token_mean", "example_mean"):
        problems.append(f"reduction {reduction!r} is not token_mean or example_mean")
    if not problems and device.startswith("cuda") and not torch.cuda.is_available():
        problems.append(f"device {device!r} requested but torch {torch.__version__} sees no CUDA device; "
                        "use `device='cpu'`")
    skipped: list[tuple[str, str]] = []
    if not problems:
        for name in list(names):
            reason = unsupported_reason(name, device, dtype, check_grads)
            if reason and "hf" in named and name.startswith("hf:") and name not in named:
                skipped.append((name, reason))  # expanded from bare "hf": listed, not silently dropped
                names.remove(name)
            elif reason:
                problems.append(f"backend {name!r} cannot run on device={device} dtype={dtype}: {reason}")
    if problems:
        raise UnsupportedBackendError("; ".join(problems), "run `packcli verify --help` for the backend matrix")
    return names, custom, skipped


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
    names, custom, skipped = resolve_backends(backends, device=device, dtype=dtype, reduction=reduction,
                                              check_grads=check_grads)
    torch_dtype = getattr(torch, dtype)
    tol = TOLERANCES[dtype]
    tensors = [to_tensors(p, cfg.vocab_size, device) for p in packs]
    controls: dict[tuple[str, int], Control] = {}
    models: dict[str, Any] = {}
    results = []
    for name in names + list(custom):
        started = time.perf_counter()
        if name.startswith("hf:"):
            from packcli.verify.attention.model import build_hf_model

            impl, _, variant = name[3:].partition("+")
            if impl not in models:
                longest = max(len(p.input_ids) for p in packs)
                models[impl] = build_hf_model(cfg, impl, seed=seed, max_positions=max(4096, 2 * longest)).to(
                    device=device, dtype=torch_dtype)
            runner: Any = HfRunner(models[impl], impl, variant)
        else:
            from packcli.verify.attention.model import build_model

            if "tiny" not in models:
                models["tiny"] = build_model(cfg, CausalAttention("reference"), seed=seed).to(
                    device=device, dtype=torch_dtype)
            runner = TinyRunner(models["tiny"], custom.get(name) or make_backend(name, device))
        pack_results = []
        for i, (p, _) in enumerate(tensors):
            key = (runner.control_key, i)
            if key not in controls:
                controls[key] = run_control(runner, p, reduction, check_grads)
            pack_results.append(check_pack(runner, controls[key], p, i, tol, reduction, check_grads, seed))
        evidence = tuple(e for r in pack_results for e in r.evidence)
        results.append(BackendResult(name, not evidence, device, dtype, reduction, tol, check_grads,
                                     any(r for _, r in tensors), _versions(name, device, runner),
                                     tuple(pack_results), evidence, time.perf_counter() - started))
    notes = ("continued positions: RoPE is relative, so with cu_seqlens masking they change logits only by "
             "rounding; detection is by rotary phase, and by logits where seams are inferred from positions",)
    return AttentionReport(tuple(results), tuple(skipped), cfg, seed, notes=notes)
