"""Run the attention check for every backend in bf16 and fp32 on fixture packs, in one call.

    python scripts/gpu_check.py                         # CUDA, every backend, bf16 + fp32
    python scripts/gpu_check.py --device cpu --backends sdpa,naive,hf:sdpa --dtypes float32
    python scripts/gpu_check.py --artifact packed/ --packs 4 --json bench-out/gpu_check.json
    python scripts/gpu_check.py --backends loader:flash-attn --artifact packed/   # packcli.data into flash-attn

Each (backend, dtype) is its own ``check_packs`` call inside one process, so one backend that is
missing, unsupported or crashing becomes a row, not an aborted run. Cheap backends run first, the
ones that compile (flex, hf:flex_attention) last, under a wall-clock budget, and only on the last
pack (three 128-token examples: two shapes to compile, where the other packs need up to eight;
hf:flex_attention took 214 s on one 7-example pack on CPU). The JSON is rewritten after every row,
so a run killed by a timeout still leaves what it measured. Nothing is installed or downloaded.
Logs go to stderr; the table is printed last, on stdout.

The row ``loader:flash-attn`` is the training recipe's real path: packcli's loader
(``collate_varlen`` with fixed shapes) feeding ``flash_attn_varlen_func`` directly; every example's
attention output must equal its output alone. flash-attn is imported only for that row; without it
the row says so (and, when the row was asked for by name, the run fails: no fallback kernel).

Exit status: 0 when every seam-aware backend that ran passed and ``naive`` was caught; 1 otherwise;
2 for a bad invocation (e.g. ``--device cuda`` without CUDA).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # scripts/ is not a package: _common.py is beside us

from _common import write_json  # noqa: E402

from packcli.verify.attention import HF_VARIANTS, IGNORE_INDEX, PackArrays, UnsupportedBackendError, check_packs  # noqa: E402
from packcli.verify.attention.model import ModelConfig  # noqa: E402
from packcli.verify.suite import packs_with_seams  # noqa: E402

CORE = ("sdpa", "torch-varlen", "flash-attn", "naive")
LOADER = "loader:flash-attn"
HF_FAST = ("eager", "sdpa", "flash_attention_2")
SLOW = ("flex",) + tuple(f"hf:flex_attention{'+' + v if v else ''}" for v in HF_VARIANTS)
# Same total length for every pack: compiled flex then reuses its kernels across packs.
FIXTURE_LENGTHS = ([1, 37, 150, 64, 90, 3, 39], [200, 1, 120, 63], [128, 128, 128])


def fixture_packs(vocab: int, seed: int = 1234) -> list[PackArrays]:
    """Three 384-token packs: a one-token example, a fully masked example, seams on flex's
    128-token block boundaries, and prompt spans masked in every example."""
    rng = np.random.default_rng(seed)
    packs = []
    for lengths in FIXTURE_LENGTHS:
        ids = rng.integers(0, vocab, sum(lengths)).astype(np.int32)
        labels, positions, cu = ids.copy(), [], [0]
        for n in lengths:
            s = cu[-1]
            prompt = n if n <= 3 else int(rng.integers(1, n // 2))  # short examples fully masked
            labels[s:s + prompt] = IGNORE_INDEX
            positions += range(n)
            cu.append(s + n)
        packs.append(PackArrays(ids, labels, np.asarray(positions, np.int32), np.asarray(cu, np.int32)))
    return packs


def default_backends(device: str) -> list[str]:
    names = list(CORE) + [LOADER] + [f"hf:{i}{'+' + v if v else ''}" for i in HF_FAST for v in HF_VARIANTS]
    return names + list(SLOW)


def loader_flash_attn(packs: list[PackArrays], device: str, dtype: str, seed: int) -> dict:
    """packcli.data's collate_varlen (padded to fixed shapes, as for CUDA graphs) into the real
    flash_attn_varlen_func; each example's output against the same kernel on that example alone.

    Raises:
        UnsupportedBackendError: not CUDA, not half precision, or flash-attn not installed.
    """
    if not device.startswith("cuda") or dtype not in ("bfloat16", "float16"):
        raise UnsupportedBackendError(f"{LOADER}: flash-attn runs on CUDA in bfloat16/float16 only "
                                      f"(got {device}, {dtype})")
    try:
        import flash_attn
        from flash_attn import flash_attn_varlen_func
    except ImportError as exc:
        raise UnsupportedBackendError(f"{LOADER}: flash_attn is not importable ({exc}); pip install 'packcli[flash]'")
    return dict(varlen_against_alone(packs, flash_attn_varlen_func, device, dtype, seed), flash_attn=flash_attn.__version__)


def varlen_against_alone(packs: list[PackArrays], flash_attn_varlen_func, device: str, dtype: str, seed: int) -> dict:
    """The loader row's measurement with any kernel of flash_attn_varlen_func's signature (the tests
    run it on CPU with an sdpa stand-in)."""
    import torch

    from packcli.data import Pack, collate_varlen
    from packcli.verify.attention.results import TOLERANCES

    loader_packs = [Pack(p.input_ids, p.labels, p.position_ids, p.cu_seqlens, np.zeros(len(p.cu_seqlens) - 1, np.int64))
                    for p in packs]
    tokens = sum(len(p.input_ids) for p in loader_packs)
    batch = collate_varlen(loader_packs, pad_to=tokens + 64, fixed_segments=sum(len(p.cu_seqlens) for p in packs) + 1,
                           as_torch=True)
    cu = batch["cu_seqlens"].to(device)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    t, heads, kv_heads, dim = batch["input_ids"].shape[1], 8, 2, 64
    torch_dtype = getattr(torch, dtype)
    q = torch.randn(t, heads, dim, generator=gen).to(device, torch_dtype)
    k, v = (torch.randn(t, kv_heads, dim, generator=gen).to(device, torch_dtype) for _ in range(2))
    out = flash_attn_varlen_func(q, k, v, cu, cu, batch["max_seqlen"], batch["max_seqlen"], causal=True)
    worst, examples = 0.0, 0
    bounds = [int(x) for x in batch["cu_seqlens"].tolist()]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b <= a or a >= tokens:
            continue  # the empty segments that fix the shape, and the padding segment
        one = torch.tensor([0, b - a], dtype=torch.int32, device=device)
        alone = flash_attn_varlen_func(q[a:b], k[a:b], v[a:b], one, one, b - a, b - a, causal=True)
        worst = max(worst, float((out[a:b] - alone).abs().max()))
        examples += 1
    # the control: the same kernel told the whole batch is one sequence must differ
    whole = torch.tensor([0, t], dtype=torch.int32, device=device)
    leak = float((flash_attn_varlen_func(q, k, v, whole, whole, t, t, causal=True)[:tokens] - out[:tokens]).abs().max())
    atol = TOLERANCES[dtype].logits_atol  # the attention check's bound for this dtype (docs: records.py)
    return {"ok": worst <= atol < leak, "atol": atol, "bitwise": worst == 0.0, "examples": examples, "tokens": tokens,
            "padded_to": t, "max_diff_vs_alone": worst, "control_one_segment_diff": leak}


def role(name: str) -> str:
    if name == "naive":
        return "must-leak"
    if name.startswith("hf:") and "+" in name and not name.endswith("+cu_seqlens"):
        return "trap"
    return "must-pass"


def summarize(result) -> dict:
    packs = result.packs
    worst = lambda xs: max(xs) if xs else None  # noqa: E731
    # each gradient difference as a fraction of its bound (atol + rtol x max |control grad|): ok <= 1
    grads = [max(max(p.grad_embed_max_diff) / p.grad_embed_bound, p.grad_weight_max_diff / p.grad_weight_bound)
             for p in packs if p.grad_embed_max_diff]
    mass = [max(p.cross_segment_mass) for p in packs if p.cross_segment_mass]
    return {
        "ok": result.ok,
        "logits_max_diff": worst([max(p.logits_max_diff) for p in packs]),
        "logits_atol": result.tolerance.logits_atol,
        "token_loss_max_diff": worst([p.token_loss_max_diff for p in packs]),
        "grad_diff_over_bound": worst(grads),
        "grad_rtol": result.tolerance.grad_rtol,
        "grad_atol": result.tolerance.grad_atol,
        "neighbour_max_diff": worst([p.neighbour.max_logit_diff for p in packs if p.neighbour]),
        "neighbour_bitwise": all(p.neighbour.bitwise_equal for p in packs if p.neighbour),
        "rotary_reset_ok": all(p.rotary.reset_phase_max_diff <= result.tolerance.rotary_atol for p in packs),
        "continued_detected": all(p.rotary.continued_detected for p in packs),
        "continued_logits_detected": all(p.rotary.continued_logits_detected for p in packs),
        "seam_label_control": all(p.seam_label_control.detected for p in packs if p.seam_label_control),
        "cross_mass_max": worst(mass),
        "seconds": round(result.seconds, 2),
        "evidence": list(result.evidence[:3]),
        "versions": result.versions,
    }


def verdict(row: dict) -> str:
    if row["status"] != "ran":
        return row["status"]
    if row["backend"] == LOADER:
        return "PASS" if row["ok"] else "FAIL"
    leaked = not row["ok"]
    if row["role"] == "must-pass":
        return "FAIL" if leaked else "PASS"
    if row["role"] == "must-leak":
        return "LEAK (as it must)" if leaked else "MISSED"
    return "LEAK" if leaked else "seam-aware"


def fmt(x) -> str:
    return "-" if x is None else f"{x:.1e}" if isinstance(x, float) else str(x)


def table(rows: list[dict]) -> str:
    head = ("backend", "dtype", "role", "verdict", "logits", "tol", "loss", "grad", "neigh", "rope", "seam", "s")
    lines = [head]
    for r in rows:
        ran = r["status"] == "ran" and r["backend"] != LOADER  # the loader row has no model-level columns
        lines.append((r["backend"], r["dtype"], r["role"], verdict(r),
                      fmt(r.get("logits_max_diff")), fmt(r.get("logits_atol")), fmt(r.get("token_loss_max_diff")),
                      fmt(r.get("grad_diff_over_bound")) if ran else "-",
                      (("=" if r["neighbour_bitwise"] else fmt(r["neighbour_max_diff"])) if ran else "-"),
                      (("ok" if r["rotary_reset_ok"] and r["continued_detected"] else "BAD")
                       + ("+L" if r["continued_logits_detected"] else "")) if ran else "-",
                      ("ok" if r["seam_label_control"] else "MISSED") if ran else "-",
                      f"{r['seconds']:.1f}" if ran else "-"))
        if r["backend"] == LOADER and r["status"] == "ran":
            lines[-1] = lines[-1][:4] + (fmt(r["max_diff_vs_alone"]), fmt(r["atol"]), "-", "-", "-", "-", "-", "-")
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    legend = ("grad: largest gradient difference over its bound (atol + rtol x max |control grad|), ok <= 1; "
              "neigh: '=' other examples' logits bitwise unchanged when example 0 is mutated, else max move; "
              "rope: phase restarts at seams and continued positions are seen ('+L': also in the logits); "
              "seam: a supervised seam label is caught by the loss comparison")
    return "\n".join(out + ["", legend])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--backends", default=None, help="comma list; default: every backend and HF variant")
    ap.add_argument("--artifact", default=None, help="take packs from a packcli artifact instead of fixtures")
    ap.add_argument("--packs", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting new rows after this")
    ap.add_argument("--json", default="bench-out/gpu_check.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (CPU path)")
    for field in ("vocab_size", "hidden_size", "num_heads", "num_kv_heads", "num_layers", "intermediate_size"):
        ap.add_argument(f"--{field.replace('_', '-')}", type=int, default=None)
    ap.add_argument("--rope-theta", type=float, default=None)
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_check: --device {args.device} but torch {torch.__version__} sees no CUDA device "
              "(use --device cpu for the CPU path)", file=sys.stderr)
        return 2
    overrides = {k: v for k, v in vars(args).items() if k in ModelConfig.__dataclass_fields__ and v is not None}
    config = ModelConfig(**overrides)
    if args.artifact:
        packs = packs_with_seams(args.artifact, args.packs)
    else:
        packs = fixture_packs(config.vocab_size)[:args.packs]
    names = args.backends.split(",") if args.backends else default_backends(args.device)
    dtypes = args.dtypes.split(",")
    # cheap rows first for every dtype, then the compiling ones
    order = [(n, d) for slow in (False, True) for d in dtypes for n in names if (n in SLOW) == slow]
    meta = {"device": args.device, "dtypes": dtypes, "torch": torch.__version__, "argv": sys.argv[1:],
            "packs": [list(np.diff(p.cu_seqlens).tolist()) for p in packs], "model_config": vars(config),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if args.device.startswith("cuda"):
        meta["gpu"] = torch.cuda.get_device_name(0)
    rows: list[dict] = []
    reports: dict[str, dict] = {}
    out = Path(args.json)
    deadline = time.monotonic() + args.budget_s
    for name, dtype in order:
        row = {"backend": name, "dtype": dtype, "role": role(name)}
        if time.monotonic() > deadline:
            row.update(status="not run (budget)")
        else:
            # flex has no CPU backward: the CPU path checks it forward-only and says so in the row
            grads = args.device.startswith("cuda") or "flex" not in name
            print(f"gpu_check: {name} {dtype} ...", file=sys.stderr, flush=True)
            subset = packs[-1:] if name in SLOW else packs
            row["packs_checked"] = len(subset)
            try:
                if name == LOADER:
                    row.update(status="ran", seconds=0.0, **loader_flash_attn(subset, args.device, dtype, args.seed))
                    rows.append(row)
                    write_json(out, {"meta": {**meta, "finished": None}, "rows": rows, "reports": reports})
                    continue
                report = check_packs(subset, backends=[name], device=args.device, dtype=dtype, seed=args.seed,
                                     model_config=config, check_grads=grads)
                row.update(status="ran", grads_checked=grads, **summarize(report.results[0]))
                reports[f"{name}/{dtype}"] = report.to_dict()
            except UnsupportedBackendError as exc:
                row.update(status="unsupported", reason=str(exc))
            except Exception as exc:  # a crashing backend is a row, with its traceback in the JSON
                row.update(status="error", reason=f"{type(exc).__name__}: {exc}"[:500],
                           traceback=traceback.format_exc()[-4000:])
                print(f"gpu_check: {name} {dtype} raised {type(exc).__name__}: {exc}", file=sys.stderr)
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
        rows.append(row)
        write_json(out, {"meta": {**meta, "finished": None}, "rows": rows, "reports": reports}, default=str)
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    write_json(out, {"meta": meta, "rows": rows, "reports": reports}, default=str)
    for r in rows:
        if r["status"] in ("unsupported", "error"):
            first_line = r["reason"].splitlines()[0]
            print(f"gpu_check: {r['backend']} {r['dtype']}: {r['status']}: {first_line}", file=sys.stderr)
    bad = [r for r in rows if verdict(r) in ("FAIL", "MISSED") or (r["status"] == "error" and r["role"] != "trap")]
    if args.backends and LOADER in names:  # asked for by name: unable to run is a failure, never a fallback
        bad += [r for r in rows if r["backend"] == LOADER and r["status"] != "ran"]
    print(f"wrote {out}", file=sys.stderr)
    print(table(rows))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
