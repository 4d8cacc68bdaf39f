"""Time chat-template rendering alone (parse once, then `Renderer.render` over every record), for two checkouts.

Rendering is where a chat template's sandbox costs time, so this isolates it: records are parsed up
front, one warm-up pass compiles the template, then ``--passes`` timed passes render every record.
To compare two versions of packcli on a shared machine, ``--compare A B`` runs one fresh process per
(checkout, round), alternating A, B, A, B, ... so both see the same load, and reports per checkout the
median over rounds of each process's median pass. Each process imports packcli from the checkout
given (``sys.path[0]``), so the same script measures code before and after a change.
``--environment sandbox --environment plain`` also renders with an unsandboxed jinja2 Environment set up
alike: what the sandbox's checks cost, measured (packcli never renders that way). ``--environment
minijinja`` renders as ``pack --render-backend minijinja`` does (the data handed over as a literal, the
cross-check on its sample included) and reports how many renders minijinja took.

Usage:
    python scripts/make_bench_corpus.py --n 5000 --out /tmp/render.jsonl
    python scripts/bench_render.py --corpus /tmp/render.jsonl --template T.jinja --compare /tmp/old .
    python scripts/bench_render.py --corpus /tmp/render.jsonl --template T.jinja --root .   # one process
    python scripts/bench_render.py --corpus bench-out/long2k.jsonl --template T.jinja --environment sandbox \
        --environment plain --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def unsandboxed() -> None:
    """Make packcli compile templates in a plain ``jinja2.Environment`` set up like its sandbox (same
    extensions, filters and globals): a lower bound that says how much of rendering the sandbox's checks
    cost. For this measurement only: packcli itself always renders in jinja2's own sandbox."""
    import jinja2

    import packcli.chat.sandbox as sandbox_module

    sandbox = sandbox_module.environment

    def plain() -> jinja2.Environment:
        model = sandbox()
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                                 extensions=[type(e) for e in model.extensions.values()])
        env.filters.update(model.filters)
        env.globals.update(model.globals)
        return env

    sandbox_module.environment = plain
    sandbox_module.compile_template.cache_clear()
    sandbox_module.template_reads.cache_clear()


def measure(root: str, corpus: str, template: str, passes: int, environment: str = "sandbox") -> dict:
    """In this process: render every chat record of ``corpus`` ``passes`` times with packcli from ``root``."""
    sys.path.insert(0, str(Path(root).resolve()))
    if environment == "plain":
        unsandboxed()
    from packcli.chat import ChatTemplate, LossPolicy, Renderer, RenderError
    from packcli.ingest import Record, parse_record

    records = []
    with open(corpus, "rb") as handle:
        for line, raw in enumerate(handle, start=1):
            parsed = parse_record(raw, file_index=0, line=line)
            if isinstance(parsed, Record):
                records.append(parsed)
    text = Path(template).read_text(encoding="utf-8")
    renderer = Renderer(ChatTemplate(text, template), LossPolicy.assistant, bos_token="<s>", eos_token="</s>",
                        engine="minijinja" if environment == "minijinja" else "jinja2")

    def one_pass() -> tuple[float, int]:
        rejected = 0
        t0 = time.perf_counter()
        for record in records:
            try:
                renderer.render(record)
            except RenderError:
                rejected += 1
        return time.perf_counter() - t0, rejected

    _, rejected = one_pass()  # warm-up: compiles the template
    seconds = [one_pass()[0] for _ in range(passes)]
    import packcli.chat.render as module

    return {"root": root, "environment": environment, "module": module.__file__, "records": len(records),
            "rejected": rejected, "pass_seconds": seconds, "median_pass_s": statistics.median(seconds),
            "render_counts": dict(getattr(renderer, "render_counts", {}))}


def compare(roots: list[str], corpus: str, template: str, passes: int, rounds: int,
            environments: tuple[str, ...] = ("sandbox",)) -> list[dict]:
    runs: dict[tuple[str, str], list[dict]] = {(root, env): [] for root in roots for env in environments}
    for r in range(rounds):
        for root, env in runs:
            command = [sys.executable, __file__, "--root", root, "--corpus", corpus, "--template", template,
                       "--passes", str(passes), "--environment", env, "--json"]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            runs[root, env].append(json.loads(out))
            print(f"round {r + 1}/{rounds} {root} ({env}): median pass {runs[root, env][-1]['median_pass_s']:.3f}s",
                  file=sys.stderr)
    results = []
    for (root, env), done in runs.items():
        per_run = [d["median_pass_s"] for d in done]
        median = statistics.median(per_run)
        results.append({"root": root, "environment": env, "module": done[0]["module"], "records": done[0]["records"],
                        "rejected": done[0]["rejected"], "runs_median_pass_s": per_run, "median_pass_s": median,
                        "render_counts": done[-1].get("render_counts", {}),
                        "us_per_record": 1e6 * median / done[0]["records"]})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--template", required=True)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--root", help="measure once, in this process, with packcli from this checkout")
    parser.add_argument("--compare", nargs="+", metavar="ROOT", help="checkouts to alternate between")
    parser.add_argument("--environment", choices=("sandbox", "plain", "minijinja"), action="append",
                        help="sandbox (packcli's, the default), plain: an unsandboxed jinja2 Environment set up "
                        "alike, to measure what the sandbox's checks cost (never what packcli runs), and/or minijinja "
                        "(--render-backend minijinja)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    environments = tuple(args.environment or ["sandbox"])
    if args.root:
        result = measure(args.root, args.corpus, args.template, args.passes, environments[0])
        print(json.dumps(result) if args.json else f"{result['median_pass_s']:.3f}s per pass of {result['records']}")
        return 0
    results = compare(args.compare or ["."], args.corpus, args.template, args.passes, args.rounds, environments)
    if args.json:
        print(json.dumps(results, indent=2))
    print(f"{'checkout':<28} {'engine':<9} {'records':>8} {'rejected':>8} {'median pass s':>14} {'us/record':>10} "
          f"{'minijinja took':>14}  runs (median pass s)")
    for r in results:
        runs = " ".join(f"{x:.3f}" for x in r["runs_median_pass_s"])
        counts = r["render_counts"]
        took = f"{counts['minijinja']}/{counts['minijinja'] + counts['jinja2']}" if counts.get("minijinja") else "-"
        print(f"{r['root']:<28} {r['environment']:<9} {r['records']:>8} {r['rejected']:>8} {r['median_pass_s']:>14.3f} "
              f"{r['us_per_record']:>10.1f} {took:>14}  {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
