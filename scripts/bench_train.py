"""Measure the training speedup honestly: supervised tokens per second, packed vs padded.

Both sides train one epoch over the SAME examples: the ones a ``packcli pack`` artifact kept, read
back with ``packcli.data.iter_packs`` and cut at ``cu_seqlens``. Same model (the tiny decoder of
``packcli.verify.attention.model``, sized by flags), same AdamW, same seed, same loss (token mean over the
step's supervised labels), and the same supervised-token budget per optimizer step::

    padded-max    one example per row, right-padded to the batch's longest   [B, L_max]
    padded-fixed  one example per row, right-padded to the capacity          [B, C]
    padded-grouped (opt-in) padded-max after HF-style group_by_length: sorted by length inside
                  shuffled mega-batches of GROUP_CHUNK examples, the strongest no-packing baseline
                  all padded: causal attention + key padding mask (HF's sdpa path with an attention_mask)
    packed-<be>   rows of the artifact, attention from packcli.verify.attention backend <be>:
                  layout "pack":  the backend runs once per packed row (a [B, C] batch of packs)
                  layout "batch": the whole batch is one varlen row (collate_varlen's cu_seqlens)

    batch = rows taken in order until their supervised tokens reach --step-tokens (both sides)
    step  = collate (numpy -> torch, timed alone) | forward + loss + backward + AdamW step (timed)

The first --warmup batches of every variant run once untimed; then one epoch of each is timed, the
variants' steps interleaved in rotating order (step i of A, B, C, then step i+1 of B, C, A, ...) so
that the load of a shared machine falls on every variant alike; both sides' totals cover exactly the
same supervised tokens. Per-step rates give the median and p10/p90; the verdict uses epoch totals
(time to train the same tokens). Density = real tokens / token slots the model computed; attention
density = useful (same-example, causal) score entries / entries computed. Peak RSS per variant comes
from a fresh process that runs the variant's --memory-steps largest steps (on CUDA:
``torch.cuda.max_memory_allocated`` per step). The packing step itself is timed too (the
``packcli pack`` CLI, wall and its own stage seconds) and set against the training time it saves.

Trade-off: a tiny random model in float32 on a shared 2-core CPU measures the *shape* of the
gain (how much compute padding wastes, what the masks cost), not a GPU trainer's absolute tokens/s.
The machine is shared, so process CPU seconds and the load average are recorded next to wall time,
and torch runs one intra-op thread by default: with two OpenMP threads on two oversubscribed cores,
threads spin waiting for a descheduled peer and step times swing more than the difference being
measured (numbers with --threads 2 in docs/benchmarks-train.md).

Usage:
    python scripts/bench_train.py --out bench-out/train.json           # default CPU run, minutes
    python scripts/bench_train.py --quick --out bench-out/quick.json    # smoke run, seconds
    python scripts/bench_train.py --device cuda --hidden 1024 --layers 8 --heads 16 --kv-heads 4 \\
        --capacity 4096 --step-tokens 32768 --n 4000 --out bench-out/train-gpu.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import (  # noqa: E402
    PACKCLI_WITH_HWM,
    load_summary,
    markdown_table,
    peak_rss_mib,
    run_environment,
    run_measured,
    write_json,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_TOKENIZER = REPO_ROOT / "fixtures" / "tokenizer"
WORKDIR = Path(tempfile.gettempdir()) / "packcli-bench-train"
IGNORE_INDEX = -100
BACKENDS = {"cpu": ("sdpa", "flex"), "cuda": ("flash-attn", "torch-varlen", "sdpa", "flex")}
VARIANTS = ("padded-max", "padded-fixed", "padded-grouped", "packed")
GROUP_CHUNK = 512  # examples per mega-batch for padded-grouped (HF: 50 x batch size)


@dataclass(frozen=True)
class TrainConfig:
    """Everything a variant's run depends on; crosses the process boundary as JSON."""

    artifact: str
    variant: str          # padded-max | padded-fixed | padded-grouped | packed-<backend>
    capacity: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    step_tokens: int
    warmup: int
    device: str
    dtype: str
    threads: int
    lr: float
    seed: int
    packed_layout: str    # auto | pack | batch
    padded_mask: str      # dense (causal & key padding) | causal (is_causal, right padding)


@dataclass(frozen=True)
class Batch:
    """One collated step: a flat [T] sequence whatever the side (the tiny model has no batch axis)."""

    ids: Any
    labels: Any
    positions: Any
    cu_seqlens: Any
    max_seqlen: int
    real: int
    slots: int
    supervised: int
    attn_useful: int
    attn_computed: int
    rows: Any             # padded: key_valid [B, L]; packed "pack": [(start, end, local cu, max)]


# ------------------------------------------------------------------------------------ attention

class PaddedAttention:
    """The control: [B, L] rows with causal attention, plus a key padding mask when ``dense``."""

    name = "padded"

    def __init__(self, dense: bool) -> None:
        self.dense = dense
        self.key_valid: Any = None  # [B, L] bool, set per batch

    def attend(self, q: Any, k: Any, v: Any, *, cu_seqlens: Any, max_seqlen: int, position_ids: Any) -> Any:
        import torch

        b, length = self.key_valid.shape

        def rows(x: Any) -> Any:
            return x.view(b, length, x.shape[1], x.shape[2]).transpose(1, 2)

        if self.dense:  # right padding: every query sees key 0, so no row is fully masked
            causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
            mask = causal[None, None] & self.key_valid[:, None, None, :]
            out = torch.nn.functional.scaled_dot_product_attention(rows(q), rows(k), rows(v), attn_mask=mask,
                                                                   enable_gqa=True)
        else:
            out = torch.nn.functional.scaled_dot_product_attention(rows(q), rows(k), rows(v), is_causal=True,
                                                                   enable_gqa=True)
        return out.transpose(1, 2).reshape(b * length, q.shape[1], q.shape[2])


class PerPackAttention:
    """Runs a packcli backend once per packed row, so a dense-mask backend pays C^2 per pack,
    not T^2 for the whole batch: the [B, C] batch a trainer without varlen kernels would use."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name = inner, inner.name
        self.rows: list[tuple[int, int, Any, int]] = []

    def attend(self, q: Any, k: Any, v: Any, *, cu_seqlens: Any, max_seqlen: int, position_ids: Any) -> Any:
        import torch

        return torch.cat([self.inner.attend(q[a:b], k[a:b], v[a:b], cu_seqlens=cu, max_seqlen=m,
                                            position_ids=position_ids[a:b]) for a, b, cu, m in self.rows])


def make_backend(name: str, device: str) -> Any:
    from packcli.verify.attention.backends import make_backend as registry_backend

    if name not in BACKENDS["cuda"]:
        raise ValueError(f"unknown backend {name!r}; choose from {sorted(set(BACKENDS['cuda']))}")
    return registry_backend(name, device)


def layout_for(backend: str, layout: str) -> str:
    """auto: dense-mask sdpa per pack (a whole-batch T x T mask wastes T^2); kernels that skip
    masked blocks or take cu_seqlens natively get the whole batch as one varlen row."""
    return layout if layout != "auto" else ("pack" if backend == "sdpa" else "batch")


# ------------------------------------------------------------------------------------- batches

def load_rows(artifact: str) -> tuple[list[Any], list[tuple[np.ndarray, np.ndarray]]]:
    """The artifact's packs, and the same examples cut out of them at cu_seqlens (copied:
    Arrow-backed arrays are read-only)."""
    from packcli.data import iter_packs

    packs = list(iter_packs(artifact))
    examples = [(np.array(p.input_ids[a:b]), np.array(p.labels[a:b]))
                for p in packs for a, b in zip(p.cu_seqlens[:-1], p.cu_seqlens[1:])]
    return packs, examples


def greedy_batches(supervised: list[int], budget: int) -> list[list[int]]:
    """Rows in order until their supervised tokens reach ``budget``; the remainder is a last batch."""
    batches, current, total = [], [], 0
    for i, s in enumerate(supervised):
        current.append(i)
        total += s
        if total >= budget:
            batches.append(current)
            current, total = [], 0
    if current:
        batches.append(current)
    return batches


def _tri(n: np.ndarray) -> int:
    return int((n * (n + 1) // 2).sum())


def collate_padded(examples: list[tuple[np.ndarray, np.ndarray]], width: int | None, vocab: int, device: str) -> Batch:
    """Right-pad each example to ``width`` (None: the batch max). Pads: id 0, label -100."""
    import torch

    lengths = np.array([len(ids) for ids, _ in examples])
    length = int(lengths.max()) if width is None else width
    b = len(examples)
    ids = np.zeros((b, length), np.int64)
    labels = np.full((b, length), IGNORE_INDEX, np.int64)
    for r, (x, y) in enumerate(examples):
        ids[r, :len(x)], labels[r, :len(y)] = x, y
    valid = np.arange(length)[None, :] < lengths[:, None]
    remap(ids, labels, vocab)
    dev = torch.device(device)
    return Batch(torch.from_numpy(ids.reshape(-1)).to(dev), torch.from_numpy(labels.reshape(-1)).to(dev),
                 torch.arange(length, device=dev).repeat(b), torch.arange(0, b * length + 1, length, dtype=torch.int32,
                                                                          device=dev),
                 length, int(lengths.sum()), b * length, int((labels != IGNORE_INDEX).sum()), _tri(lengths),
                 b * length * length, torch.from_numpy(valid).to(dev))


def collate_packed(packs: list[Any], layout: str, vocab: int, device: str) -> Batch:
    """``packcli.data.collate_varlen`` (no padding: varlen), plus per-pack slices for layout "pack"."""
    import torch

    from packcli.data import collate_varlen

    batch = collate_varlen(packs)
    ids, labels = batch["input_ids"][0].astype(np.int64), batch["labels"][0].astype(np.int64)
    remap(ids, labels, vocab)
    dev = torch.device(device)
    pack_lengths = np.array([len(p.input_ids) for p in packs])
    example_lengths = np.diff(batch["cu_seqlens"])
    rows = []
    if layout == "pack":
        starts = np.concatenate([[0], np.cumsum(pack_lengths)])
        rows = [(int(a), int(b), torch.from_numpy(np.array(p.cu_seqlens, np.int32)).to(dev),
                 int(np.diff(p.cu_seqlens).max())) for a, b, p in zip(starts[:-1], starts[1:], packs)]
    computed = int((pack_lengths ** 2).sum()) if layout == "pack" else int(len(ids)) ** 2
    return Batch(torch.from_numpy(ids).to(dev), torch.from_numpy(labels).to(dev),
                 torch.from_numpy(batch["position_ids"][0].astype(np.int64)).to(dev),
                 torch.from_numpy(batch["cu_seqlens"]).to(dev), batch["max_seqlen"], len(ids), len(ids),
                 int((labels != IGNORE_INDEX).sum()), _tri(example_lengths), computed, rows)


def remap(ids: np.ndarray, labels: np.ndarray, vocab: int) -> None:
    """Token ids >= vocab are folded modulo vocab (a smaller LM head than the tokenizer's vocab;
    the cost per token is what is measured, not what is learned). In place."""
    if ids.size and int(ids.max()) >= vocab:
        np.remainder(ids, vocab, out=ids)
        np.copyto(labels, labels % vocab, where=labels != IGNORE_INDEX)


# ---------------------------------------------------------------------------------- the variants

@dataclass
class VariantRun:
    """One variant's live state during the interleaved run (mutable, never leaves this process)."""

    cfg: TrainConfig
    layout: str
    backend: Any
    batches: list[list[int]]
    collate: Any
    model: Any
    optimizer: Any
    rows: int
    records: list[dict] = field(default_factory=list)
    skipped: str | None = None
    peak_memory: float = 0.0


def prepare(cfg: TrainConfig, packs: list[Any], examples: list[tuple[np.ndarray, np.ndarray]]) -> VariantRun:
    """Batches, collate function, model and AdamW for one variant (same seed: same initial weights)."""
    import torch

    from packcli.verify.attention.model import ModelConfig, build_model

    if cfg.variant.startswith("packed-"):
        backend_name = cfg.variant.removeprefix("packed-")
        layout = layout_for(backend_name, cfg.packed_layout)
        inner = make_backend(backend_name, cfg.device)
        backend = PerPackAttention(inner) if layout == "pack" else inner
        supervised = [int((np.asarray(p.labels) != IGNORE_INDEX).sum()) for p in packs]
        units: list[Any] = packs

        def collate(rows: list[int]) -> Batch:
            return collate_packed([packs[i] for i in rows], layout, cfg.vocab, cfg.device)
    else:
        layout = "rows"
        backend = PaddedAttention(dense=cfg.padded_mask == "dense")
        order = np.random.default_rng(cfg.seed).permutation(len(examples))  # a trainer's shuffled sampler
        if cfg.variant == "padded-grouped":  # HF group_by_length: sort by length inside shuffled mega-batches
            order = np.concatenate([sorted(chunk, key=lambda i: -len(examples[i][0]))
                                    for chunk in np.array_split(order, max(1, -(-len(order) // GROUP_CHUNK)))])
        units = [examples[i] for i in order]
        supervised = [int((y != IGNORE_INDEX).sum()) for _, y in units]
        width = cfg.capacity if cfg.variant == "padded-fixed" else None

        def collate(rows: list[int]) -> Batch:
            return collate_padded([units[i] for i in rows], width, cfg.vocab, cfg.device)

    model_cfg = ModelConfig(vocab_size=cfg.vocab, hidden_size=cfg.hidden, num_heads=cfg.heads,
                            num_kv_heads=cfg.kv_heads, num_layers=cfg.layers, intermediate_size=cfg.intermediate)
    model = build_model(model_cfg, backend, seed=cfg.seed).to(device=cfg.device, dtype=getattr(torch, cfg.dtype))
    model.train()
    return VariantRun(cfg, layout, backend, greedy_batches(supervised, cfg.step_tokens), collate, model,
                      torch.optim.AdamW(model.parameters(), lr=cfg.lr), len(units))


def train_step(run: VariantRun, batch: Batch) -> float:
    """Forward, token-mean loss over the step's supervised labels, backward, AdamW step."""
    loss = forward_backward(run, batch)
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    return loss


def forward_backward(run: VariantRun, batch: Batch) -> float:
    import torch

    if isinstance(run.backend, PaddedAttention):
        run.backend.key_valid = batch.rows
    elif isinstance(run.backend, PerPackAttention):
        run.backend.rows = batch.rows
    logits = run.model(batch.ids, position_ids=batch.positions, cu_seqlens=batch.cu_seqlens,
                       max_seqlen=batch.max_seqlen)
    # HF shift over the flat sequence: seams and row starts carry -100, so nothing crosses them.
    loss = torch.nn.functional.cross_entropy(logits[:-1].float(), batch.labels[1:], ignore_index=IGNORE_INDEX,
                                             reduction="sum") / max(batch.supervised, 1)
    loss.backward()
    return float(loss.detach())


def timed_step(run: VariantRun, rows: list[int]) -> dict:
    """Collation and compute timed apart (CUDA synchronised at each boundary)."""
    import torch

    cuda = run.cfg.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sync()
    c0 = time.perf_counter()
    batch = run.collate(rows)
    sync()
    c1, cpu1 = time.perf_counter(), time.process_time()
    loss = train_step(run, batch)
    sync()
    record = {"collate_s": c1 - c0, "compute_s": time.perf_counter() - c1, "compute_cpu_s": time.process_time() - cpu1,
              "rows": len(rows), "real": batch.real, "slots": batch.slots, "supervised": batch.supervised,
              "attn_useful": batch.attn_useful, "attn_computed": batch.attn_computed, "loss": loss}
    if cuda:
        run.peak_memory = max(run.peak_memory, torch.cuda.max_memory_allocated() / 2**20)
    return record


def run_interleaved(runs: list[VariantRun], warmup: int) -> None:
    """Warm every variant up, then time one epoch of each, step by step in rotating order, so a
    shared machine's load drifts over all variants alike instead of over whichever ran last."""
    for run in runs:
        try:
            for rows in run.batches[:warmup]:
                train_step(run, run.collate(rows))
        except NotImplementedError as exc:  # flex on CPU: no backward in this torch; report, never substitute
            run.skipped = f"{type(exc).__name__}: {exc}"
    live = [r for r in runs if r.skipped is None]
    gc.collect()
    gc.disable()  # as timeit does: a cycle collection would land in whichever step triggered it
    try:
        for i in range(max((len(r.batches) for r in live), default=0)):
            for run in live[i % len(live):] + live[:i % len(live)]:
                if i < len(run.batches):
                    run.records.append(timed_step(run, run.batches[i]))
    finally:
        gc.enable()


# Profiler op name -> where the time goes, first match wins (self CPU time of aten ops, forward and backward).
OP_GROUPS = (
    ("attention kernel", ("scaled_dot_product", "flash_attention", "flex_attention")),
    ("attention mask", ("aten::tril", "aten::eq", "aten::bitwise_and", "aten::logical_and", "aten::repeat_interleave",
                        "aten::ones")),
    ("matmul (projections, MLP, LM head)", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")),
    ("loss", ("log_softmax", "nll_loss", "cross_entropy")),
)
OTHER = "other (norms, RoPE, SwiGLU, embedding, copies)"


def profile_step(run: VariantRun) -> dict[str, float]:
    """Self CPU seconds per op group of forward + backward for one step of median size (the profiler
    slows it, so it is not one of the timed steps), and the AdamW step's CPU seconds timed apart."""
    import torch

    by_size = sorted(run.batches, key=lambda rows: run.collate(rows).slots)
    batch = run.collate(by_size[len(by_size) // 2])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        forward_backward(run, batch)
    groups = dict.fromkeys([g for g, _ in OP_GROUPS] + [OTHER], 0.0)
    for event in prof.key_averages():
        groups[next((g for g, keys in OP_GROUPS if any(k in event.key for k in keys)), OTHER)] += \
            event.self_cpu_time_total / 1e6
    del prof
    gc.collect()  # the profiler's event objects would otherwise be collected inside the timed step
    start = time.thread_time()  # not process_time: the profiler's own threads may still be winding down
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    groups["optimizer (AdamW step, timed apart)"] = time.thread_time() - start
    return {"slots": batch.slots, "seconds": groups}


def probe_memory(cfg: TrainConfig, steps: int) -> dict:
    """In a fresh process: the variant's ``steps`` largest batches (most token slots), peak RSS."""
    import torch

    torch.set_num_threads(cfg.threads)
    packs, examples = load_rows(cfg.artifact)
    run = prepare(cfg, packs, examples)
    before = peak_rss_mib()
    largest = sorted(run.batches, key=lambda rows: -run.collate(rows).slots)[:steps]
    try:
        for rows in largest:
            train_step(run, run.collate(rows))
    except NotImplementedError as exc:
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    return {"rss_before_train_mib": before, "peak_rss_mib": peak_rss_mib()}


def summarize(records: list[dict]) -> dict:
    def total(key: str) -> float:
        return float(sum(r[key] for r in records))

    rate = np.array([r["supervised"] / r["compute_s"] for r in records])
    compute, collate = total("compute_s"), total("collate_s")
    return {
        "supervised_tokens": int(total("supervised")), "real_tokens": int(total("real")), "slots": int(total("slots")),
        "compute_s": compute, "compute_cpu_s": total("compute_cpu_s"), "collate_s": collate,
        "supervised_tok_s": total("supervised") / compute, "real_tok_s": total("real") / compute,
        "supervised_tok_cpu_s": total("supervised") / total("compute_cpu_s"),
        "step_supervised_tok_s": {"median": float(np.median(rate)), "p10": float(np.percentile(rate, 10)),
                                  "p90": float(np.percentile(rate, 90))},
        "step_supervised_tokens": {"median": float(np.median([r["supervised"] for r in records])),
                                   "min": int(min(r["supervised"] for r in records)),
                                   "max": int(max(r["supervised"] for r in records))},
        "collate_share": collate / (collate + compute), "density": total("real") / total("slots"),
        "attn_density": total("attn_useful") / total("attn_computed"),
        "mean_loss": float(np.mean([r["loss"] for r in records])),
    }


# ----------------------------------------------------------------------------------- the driver

def time_pack(corpus: Path, args: argparse.Namespace, out_dir: Path) -> dict:
    """``packcli pack`` on the corpus: wall, CPU and peak RSS of the CLI process, and its own stage seconds."""
    summary, hwm = out_dir.parent / f"{out_dir.name}.pack.json", out_dir.parent / f"{out_dir.name}.hwm"
    cli = ["pack", str(corpus), "-t", str(args.tokenizer), "-o", str(out_dir), "-c", str(args.capacity),
           "--strategy", args.strategy, "--template", args.template, "--force", "--json"]
    if args.quick:  # the smoke run's 256-token capacity drops most conversations, knowingly: machinery, not numbers
        cli += ["--max-reject-fraction", "1"]
    with summary.open("w") as handle:
        child = run_measured([sys.executable, "-c", PACKCLI_WITH_HWM, str(hwm), *cli], stdout=handle)
    if child.returncode:
        raise SystemExit(f"error: packcli pack failed (exit {child.returncode}): packcli {' '.join(cli)}")
    report = json.loads(summary.read_text())
    return {"command": " ".join(["packcli", *cli]), "wall_s": child.wall_s, "cpu_s": child.cpu_s,
            "peak_rss_mib": int(hwm.read_text()) / 1024, "stage_seconds": report["stage_seconds"],
            "counts": report["counts"], "density": report["metrics"]["density"]}


def run_variants(configs: list[TrainConfig], memory_steps: int, profile: bool) -> tuple[list[dict], float]:
    """Every variant in this process, interleaved; peak memory per variant from a fresh process each."""
    import torch

    cfg0 = configs[0]
    torch.set_num_threads(cfg0.threads)
    start = time.perf_counter()
    packs, examples = load_rows(cfg0.artifact)
    load_s = time.perf_counter() - start
    runs = [prepare(c, packs, examples) for c in configs]
    print(f"[bench_train] {', '.join(c.variant for c in configs)}: {cfg0.warmup} warm-up steps each, then one "
          f"epoch each, interleaved ...", file=sys.stderr, flush=True)
    run_interleaved(runs, cfg0.warmup)
    results = []
    for run in runs:
        result: dict[str, Any] = {"variant": run.cfg.variant, "layout": run.layout, "rows": run.rows,
                                  "steps": len(run.batches),
                                  "parameters": sum(p.numel() for p in run.model.parameters())}
        if run.skipped:
            results.append({**result, "skipped": run.skipped})
            continue
        result.update(summarize(run.records), records=run.records)
        if profile:
            result["profile"] = profile_step(run)
        if run.cfg.device.startswith("cuda"):
            result.update(peak_memory_mib=run.peak_memory,
                          peak_memory_kind="torch.cuda.max_memory_allocated over its steps (all variants resident)")
        elif memory_steps:
            print(f"[bench_train] peak RSS of {run.cfg.variant} in a fresh process ...", file=sys.stderr, flush=True)
            with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as handle:
                out = Path(handle.name)
            code = run_measured([sys.executable, __file__, "--_child", json.dumps(asdict(run.cfg)),
                                 "--memory-steps", str(memory_steps), "--out", str(out)], stdout=sys.stderr).returncode
            if code:
                raise SystemExit(f"error: memory probe of {run.cfg.variant} failed (exit {code})")
            probe = json.loads(out.read_text())
            out.unlink()
            result.update(peak_memory_mib=probe["peak_rss_mib"], rss_before_train_mib=probe["rss_before_train_mib"],
                          peak_memory_kind=f"peak RSS of a fresh process running its {memory_steps} largest steps")
        else:
            result.update(peak_memory_mib=peak_rss_mib(),
                          peak_memory_kind="peak RSS of this process (all variants together)")
        results.append(result)
    return results, load_s


def verdict(results: list[dict], pack: dict) -> tuple[dict, list[str]]:
    """Packed vs each padded control, on epoch totals; and the packing cost vs the time it saves."""
    ran = {r["variant"]: r for r in results if "skipped" not in r}
    lines, out = [], {}
    packed = [r for r in ran.values() if r["variant"].startswith("packed-")]
    for base_name in ("padded-max", "padded-fixed", "padded-grouped"):
        base = ran.get(base_name)
        for p in packed if base else []:
            speedup = p["supervised_tok_s"] / base["supervised_tok_s"]
            density_ratio = p["density"] / base["density"]
            saved = base["compute_s"] - p["compute_s"]
            key = f"{p['variant']}_vs_{base_name}"
            out[key] = {"speedup": speedup, "density_ratio": density_ratio, "of_density_ratio": speedup / density_ratio,
                        "median_step_speedup": p["step_supervised_tok_s"]["median"]
                        / base["step_supervised_tok_s"]["median"],
                        "cpu_time_speedup": p["supervised_tok_cpu_s"] / base["supervised_tok_cpu_s"],
                        "train_s_saved": saved, "pack_wall_over_saved": pack["wall_s"] / saved if saved > 0 else None,
                        "pack_stage_over_saved": pack["stage_seconds"]["pack_s"] / saved if saved > 0 else None}
            v = out[key]
            word = "improves" if speedup > 1.0 else "does NOT improve"
            cost = (f"packcli pack took {pack['wall_s']:.1f} s wall "
                    f"(pack stage {pack['stage_seconds']['pack_s']:.2f} s) "
                    f"= {v['pack_wall_over_saved']:.2f}x the {saved:.1f} s of training it saved this epoch"
                    if saved > 0 else f"no training time saved ({saved:.1f} s); packing cost {pack['wall_s']:.1f} s")
            lines.append(f"{p['variant']} vs {base_name}: packing {word} supervised tokens/s: {speedup:.2f}x "
                         f"(median step {v['median_step_speedup']:.2f}x, CPU-time {v['cpu_time_speedup']:.2f}x); "
                         f"density ratio {density_ratio:.2f}x, so {v['of_density_ratio']:.0%} of it realised; {cost}.")
    for r in results:
        if "skipped" in r:
            lines.append(f"{r['variant']}: not measured: {r['skipped']}")
    return out, lines


def table(results: list[dict]) -> str:
    header = ("variant", "layout", "steps", "sup tok/step (median)", "**sup tok/s** (epoch)",
              "sup tok/s per step median [p10, p90]", "real tok/s", "sup tok / CPU-s", "density", "attn density",
              "collate share", "peak mem MiB (of which training)")
    rows = []
    for r in results:
        if "skipped" in r:
            rows.append((r["variant"], r["layout"], f"skipped: {r['skipped'][:90]}", *[""] * 9))
            continue
        s = r["step_supervised_tok_s"]
        before = r.get("rss_before_train_mib")
        delta = f" (+{r['peak_memory_mib'] - before:,.0f})" if before is not None else ""
        rows.append((r["variant"], r["layout"], r["steps"], f"{r['step_supervised_tokens']['median']:,.0f}",
                     f"**{r['supervised_tok_s']:,.0f}**", f"{s['median']:,.0f} [{s['p10']:,.0f}, {s['p90']:,.0f}]",
                     f"{r['real_tok_s']:,.0f}", f"{r['supervised_tok_cpu_s']:,.0f}", f"{r['density']:.3f}",
                     f"{r['attn_density']:.3f}", f"{r['collate_share']:.1%}", f"{r['peak_memory_mib']:,.0f}{delta}"))
    return markdown_table(header, rows, align="ll" + "r" * 10)


def profile_table(results: list[dict]) -> str:
    """Share of a median step's self CPU time per op group (torch.profiler; forward + backward + AdamW)."""
    profiled = [r for r in results if "profile" in r]
    groups = list(profiled[0]["profile"]["seconds"]) if profiled else []
    header = ("op group", *(f"{r['variant']} ({r['profile']['slots']:,} slots)" for r in profiled))
    rows = []
    for g in groups:
        cells = []
        for r in profiled:
            sec = r["profile"]["seconds"]
            cells.append(f"{sec[g] * 1e3:,.0f} ms ({sec[g] / sum(sec.values()):.0%})")
        rows.append((g, *cells))
    rows.append(("total", *(f"{sum(r['profile']['seconds'].values()) * 1e3:,.0f} ms" for r in profiled)))
    return markdown_table(header, rows, align="l" + "r" * len(profiled))


def environment(device: str) -> dict:
    import torch

    env = {**run_environment(REPO_ROOT), "torch": torch.__version__, "numpy": np.__version__}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name()
    return env


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, help="JSONL corpus (default: generate --n conversations under the temp dir)")
    p.add_argument("--n", type=int, default=200, help="conversations to generate (default: %(default)s; --quick: 40)")
    p.add_argument("-t", "--tokenizer", default=str(FIXTURE_TOKENIZER))
    p.add_argument("--template", default="auto")
    p.add_argument("-c", "--capacity", type=int, default=1024)
    p.add_argument("--strategy", default="window", choices=("window", "bfd", "ffd", "sequential"))
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, help="default: heads // 2 (GQA), at least 1")
    p.add_argument("--intermediate", type=int, help="SwiGLU width (default: 3 x hidden)")
    p.add_argument("--vocab", type=int, help="LM head size (default: the tokenizer's; smaller folds ids modulo it)")
    p.add_argument("--step-tokens", type=int, default=2048, help="supervised tokens per optimizer step (both sides)")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps per variant")
    p.add_argument("--backends", help="comma-separated packed backends (default cpu: sdpa,flex; "
                                      "cuda: flash-attn,torch-varlen,sdpa,flex)")
    p.add_argument("--variants", default="padded-max,padded-fixed,packed",
                   help=f"comma-separated, from {', '.join(VARIANTS)} (packed: one per backend)")
    p.add_argument("--packed-layout", default="auto", choices=("auto", "pack", "batch"))
    p.add_argument("--padded-mask", default="dense", choices=("dense", "causal"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", help="default: float32 on cpu, bfloat16 on cuda")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: see the docstring)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory-steps", type=int, default=2,
                   help="peak RSS per variant: a fresh process runs its N largest steps (0: this process's peak)")
    p.add_argument("--profile", action="store_true",
                   help="after timing, profile one median-size step per variant: CPU time by op group")
    p.add_argument("--workdir", type=Path, default=WORKDIR)
    p.add_argument("--quick", action="store_true", help="tiny smoke run: 40 conversations, tiny model, no probes")
    p.add_argument("--out", type=Path, help="write JSON here")
    p.add_argument("--_child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.capacity, args.hidden, args.layers, args.heads = min(args.n, 40), 256, 32, 1, 2
        args.step_tokens, args.warmup, args.memory_steps = 256, 1, 0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args._child:
        args.out.write_text(json.dumps(probe_memory(TrainConfig(**json.loads(args._child)), args.memory_steps)))
        return 0

    cuda = args.device.startswith("cuda")
    backends = args.backends.split(",") if args.backends else list(BACKENDS["cuda" if cuda else "cpu"])
    problems = [f"--{n.replace('_', '-')} {getattr(args, n)} must be >= 1" for n in
                ("capacity", "hidden", "layers", "heads", "step_tokens", "threads", "n") if getattr(args, n) < 1]
    problems += [f"backend {b!r} is not one of {sorted(set(BACKENDS['cuda']))}" for b in backends
                 if b not in BACKENDS["cuda"]]
    problems += [f"variant {v!r} is not one of {', '.join(VARIANTS)}" for v in args.variants.split(",")
                 if v not in VARIANTS]
    problems += [f"backend {b!r} needs --device cuda" for b in backends
                 if b in ("flash-attn", "torch-varlen") and not cuda]
    if args.device != "cpu" and not cuda:
        problems.append(f"--device {args.device!r} is not cpu or cuda[:N]")
    if cuda:
        import importlib.util

        import torch

        if not torch.cuda.is_available():
            problems.append(f"--device {args.device} but torch {torch.__version__} sees no CUDA device")
        if "flash-attn" in backends and importlib.util.find_spec("flash_attn") is None:
            problems.append("backend 'flash-attn' needs flash_attn: pip install 'packcli[flash]', or drop it "
                            "from --backends")
    if problems:
        raise SystemExit("error: " + "; ".join(problems))

    args.workdir.mkdir(parents=True, exist_ok=True)
    corpus = args.input
    if corpus is None:
        sys.path.insert(0, str(REPO_ROOT / "scripts"))
        from make_bench_corpus import ensure_bench

        corpus = ensure_bench(args.workdir / f"corpus-{args.n}.jsonl", args.n)
    env = environment(args.device)
    artifact = args.workdir / f"packed-{corpus.stem}-c{args.capacity}-{args.strategy}"
    pack = time_pack(corpus, args, artifact)

    from packcli.tokenizer.load import load_tokenizer

    vocab = args.vocab or load_tokenizer(args.tokenizer).tokenizer.get_vocab_size()
    heads = args.heads
    base = TrainConfig(artifact=str(artifact), variant="", capacity=args.capacity, hidden=args.hidden,
                       layers=args.layers, heads=heads, kv_heads=args.kv_heads or max(1, heads // 2),
                       intermediate=args.intermediate or 3 * args.hidden, vocab=vocab, step_tokens=args.step_tokens,
                       warmup=args.warmup, device=args.device,
                       dtype=args.dtype or ("bfloat16" if cuda else "float32"), threads=args.threads, lr=args.lr,
                       seed=args.seed, packed_layout=args.packed_layout, padded_mask=args.padded_mask)
    variants = [v for name in args.variants.split(",")
                for v in ([f"packed-{b}" for b in backends] if name == "packed" else [name])]
    results, load_s = run_variants([replace(base, variant=v) for v in variants], args.memory_steps, args.profile)
    summary, lines = verdict(results, pack)

    data = {"config": asdict(base) | {"variant": None}, "corpus": str(corpus), "pack": pack, "load_s": load_s,
            "results": [{k: v for k, v in r.items() if k != "records"} for r in results],
            "records": {r["variant"]: r.get("records", []) for r in results}, "verdict": summary,
            "verdict_text": lines, "environment": {**env, "loadavg_end": os.getloadavg()}}
    if args.out:
        write_json(args.out, data)
    c = base
    print(f"\nmodel: tiny decoder hidden {c.hidden}, {c.layers} layers, {c.heads} heads ({c.kv_heads} kv), "
          f"SwiGLU {c.intermediate}, vocab {c.vocab}, {results[0].get('parameters', 0):,} parameters, {c.dtype} "
          f"on {c.device}, {c.threads} thread(s); AdamW lr {c.lr}; >= {c.step_tokens} supervised tokens/step; "
          f"{c.warmup} warm-up steps; one timed epoch per variant, steps interleaved")
    print(f"data: {pack['counts']['packed']} examples ({pack['counts']['dropped']} of {pack['counts']['records']} "
          f"dropped as > capacity {c.capacity}) in {pack['counts']['packs']} packs ({args.strategy}, density "
          f"{pack['density']:.3f}); pack: {pack['command']}")
    print(f"{load_summary(env['loadavg_start'])}\n")
    print("\n".join(f"verdict: {line}" for line in lines))
    if args.profile:
        print(f"\n{profile_table(results)}")
    print(f"\n{table(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
