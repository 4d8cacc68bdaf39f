"""Packed vs alone for one pack: losses in pack coordinates, the control run, and the comparison with
its three built-in controls (a mutated neighbour, continued positions, a supervised seam label).

Losses in pack coordinates: entry t-1 is the term that predicts label[t] (t = 1..T-1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from packcli.contract import IGNORE_INDEX
from packcli.verify.attention.backends import segment_ids
from packcli.verify.attention.results import (
    NeighbourMutation,
    PackArrays,
    PackResult,
    Reduction,
    RotaryControl,
    SeamLabelControl,
    Tolerance,
)


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
class PackTensors:
    ids: Any
    labels: Any
    pos: Any
    cu: Any
    max_seqlen: int
    seg: Any
    spans: list[tuple[int, int]]


@dataclass
class Control:
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


def run_control(runner: Any, p: PackTensors, reduction: Reduction, grads: bool) -> Control:
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
    return Control(torch.cat(logits), losses, mask, torch.cat(phases),
                    torch.cat(g_embed).float() if grads else None, g_weight)


def _max_abs(x: Any) -> float:
    return float(x.abs().max()) if x.numel() else 0.0


def _per_example_max(a: Any, b: Any, spans: list[tuple[int, int]]) -> list[float]:
    return [float((a[s:e] - b[s:e]).abs().max()) for s, e in spans]


def check_pack(runner: Any, ctrl: Control, p: PackTensors, index: int, tol: Tolerance, reduction: Reduction,
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

    g_embed_diff: tuple[float, ...] | None = None
    g_weight_diff = g_embed_bound = g_weight_bound = None
    if grads:  # |diff| <= atol + rtol * max |control|: no division, so a zero control gradient is no alarm
        ge = torch.zeros_like(emb) if g_embed is None else g_embed
        diff = ge.float() - ctrl.grad_embed
        g_embed_diff = tuple(_max_abs(diff[s:e]) for s, e in spans)
        g_embed_bound = tol.grad_bound(_max_abs(ctrl.grad_embed))
        ev += [f"example {j}: input-embedding grad differs by {d:.3g} > {g_embed_bound:.3g} "
               f"({tol.grad_atol:g} + {tol.grad_rtol:g} x max |control grad|)"
               for j, d in enumerate(g_embed_diff) if d > g_embed_bound]
        gw = torch.zeros_like(ctrl.grad_weight) if g_weight is None else g_weight.float()
        g_weight_diff = _max_abs(gw - ctrl.grad_weight)
        g_weight_bound = tol.grad_bound(_max_abs(ctrl.grad_weight))
        if g_weight_diff > g_weight_bound:
            ev.append(f"layer-0 q_proj grad differs by {g_weight_diff:.3g} > {g_weight_bound:.3g} "
                      f"({tol.grad_atol:g} + {tol.grad_rtol:g} x max |control grad|)")

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
                      tuple(ex_diffs), (tm_p, tm_c), (em_p, em_c), g_embed_diff, g_embed_bound, g_weight_diff,
                      g_weight_bound, neighbour, rotary,
                      seam_control, mass, not ev, tuple(f"pack {index}: {e}" for e in ev))


def to_tensors(pack: PackArrays, vocab_size: int, device: str) -> tuple[PackTensors, bool]:
    import torch

    ids = np.array(pack.input_ids, dtype=np.int64)
    labels = np.array(pack.labels, dtype=np.int64)
    remapped = bool(ids.max() >= vocab_size) or bool(labels.max() >= vocab_size)
    if remapped:  # token identity is irrelevant to seams; the label == input_id relation survives
        ids = ids % vocab_size
        labels = np.where(labels == IGNORE_INDEX, IGNORE_INDEX, labels % vocab_size)
    cu = torch.as_tensor(np.array(pack.cu_seqlens, dtype=np.int32), device=device)  # copy: Arrow arrays are read-only
    spans = [(int(a), int(b)) for a, b in zip(pack.cu_seqlens[:-1], pack.cu_seqlens[1:])]
    return PackTensors(torch.as_tensor(ids, device=device), torch.as_tensor(labels, device=device),
                    torch.as_tensor(np.array(pack.position_ids, dtype=np.int64), device=device), cu,
                    max(b - a for a, b in spans), segment_ids(cu, len(ids)), spans), remapped
