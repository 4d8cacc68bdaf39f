"""Human and JSON renderings of results. Results go to stdout; nothing here computes anything."""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table

from packcli.cli import console
from packcli.cli.options import as_flags


def flagged(data: object) -> object:
    """``data`` (a result's ``to_dict``) with every string's parameter names printed as flags (`as_flags`):
    a report's messages and advice name parameters for a Python caller, and flags for a CLI user."""
    if isinstance(data, str):
        return as_flags(data)
    if isinstance(data, dict):
        return {key: flagged(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [flagged(value) for value in data]
    return data


@dataclass(frozen=True)
class Col:
    """A column of a fitted table: its header, alignment, and how much a reader needs it (lower goes first)."""

    header: str
    justify: str = "right"
    keep: int = 5


def fitted_table(title: str, columns: list[Col], rows: list[list[str]], *, width: int | None = None) -> Table:
    """A table whose cells are never cut: each column is as wide as its widest cell (a header may
    wrap), and when the terminal is too narrow for all of them the least needed columns are left
    out, with a note in the title, instead of numbers ending in an ellipsis."""
    width = width or console.out.width
    widths = [max([*(len(word) for word in c.header.split()), 1, *(len(r[i]) for r in rows)])
              for i, c in enumerate(columns)]
    shown = list(range(len(columns)))
    while len(shown) > 1 and sum(widths[i] + 3 for i in shown) + 1 > width:
        shown.remove(min(shown, key=lambda i: (columns[i].keep, -i)))
    left_out = [columns[i].header for i in range(len(columns)) if i not in shown]
    table = Table(title=title + (f" (too narrow for: {', '.join(left_out)}; see --json)" if left_out else ""),
                  title_justify="left")
    for i in shown:
        table.add_column(columns[i].header, justify=columns[i].justify, min_width=widths[i], max_width=widths[i],
                         overflow="fold")
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table


def render_pack_summary(summary, *, as_json: bool) -> None:  # noqa: ANN001 - PackSummary, imported lazily
    m = summary.manifest
    counts, metrics = m["counts"], m["metrics"]
    if as_json:
        from packcli.artifact.manifest import Manifest
        from packcli.stats import input_counts

        console.print_json({"out": str(summary.out), "manifest_sha256": m["manifest_sha256"], "counts": counts,
                            "sources": input_counts(Manifest.of(m)),
                            "metrics": metrics, "stage_seconds": summary.stage_seconds, "units": summary.units,
                            "resumed_units": summary.resumed_units, "lost": summary.lost,
                            "shards": [s["name"] for s in m["shards"]], "tokenization": m["unhashed"]["tokenization"],
                            "template": {**{k: m["template"].get(k) for k in ("origin", "name", "sha256")},
                                         "note": m["unhashed"].get("template_note", "")},
                            "input_warnings": m["unhashed"]["input_warnings"]})
        return
    table = Table(title=f"packed -> {summary.out}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("records", f"{counts['records']:,}")
    table.add_row("packed / truncated", f"{counts['packed']:,} / {counts['truncated']:,}")
    table.add_row("dropped / rejected", f"{counts['dropped']:,} / {counts['rejected']:,}")
    for fate, what in (("truncated", "cut by truncation"), ("dropped", "dropped as over-long"),
                       ("split", "lost by splitting")):
        lost = summary.lost[fate]
        if lost["examples"] and (lost["tokens"] or lost["supervised_tokens"]):
            table.add_row(what, f"{lost['supervised_tokens']:,} supervised tokens ({lost['tokens']:,} tokens, "
                                f"{lost['examples']:,} examples)")
    if counts["duplicate"] or counts["unsampled"] or m["config"]["dedupe"] != "none" or m["config"]["mix"]:
        table.add_row("duplicate / unsampled", f"{counts['duplicate']:,} / {counts['unsampled']:,}")
    for name, count in counts.get("dropped_fields", {}).items():
        table.add_row(f"{name} dropped by the template", f"{count:,} records (--allow-dropped-fields)")
    table.add_row("packs (capacity)", f"{counts['packs']:,} ({m['config']['capacity']:,})")
    table.add_row("tokens / supervised", f"{counts['tokens']:,} / {counts['supervised_tokens']:,}")
    table.add_row("density", f"{metrics['density']:.4f}")
    table.add_row("supervised density", f"{metrics['supervised_density']:.4f}")
    table.add_row("gap to lower bound", f"{metrics['gap_to_bound']:.4%}")
    table.add_row("displacement mean / max", f"{metrics['displacement_mean']:.1f} / {metrics['displacement_max']:.0f}")
    table.add_row("template", _template_line(m["template"], m["unhashed"].get("template_note", "")))
    table.add_row("strategy", f"{m['config']['strategy']} (window {m['config']['window']})")
    table.add_row("shards", str(len(m["shards"])))
    if summary.resumed_units:
        table.add_row("units resumed", f"{summary.resumed_units:,} of {summary.units:,}")
    tok = m["unhashed"]["tokenization"]
    table.add_row("tokenizer backend", f"{tok['backend']} {tok['version']} (guard checked "
                  f"{tok['guard']['checked']:,} of {tok['guard']['examples']:,})" if tok["guard"]["examples"]
                  else f"{tok['backend']} {tok['version']}")
    rendering = m["unhashed"].get("rendering")
    if rendering is not None:
        table.add_row("render engine", _rendering_line(rendering))
    table.add_row("time", " ".join(f"{k.removesuffix('_s')} {v:.2f}s" for k, v in summary.stage_seconds.items()))
    table.add_row("manifest", m["manifest_sha256"][:16])
    console.out.print(table)
    if len(m["inputs"]) > 1 or m["config"]["mix"]:
        from packcli.artifact.manifest import Manifest
        from packcli.stats import input_counts

        console.out.print(sources_table(input_counts(Manifest.of(m))))
    if counts["rejected"]:
        console.err.print(f"{counts['rejected']} records rejected: see {summary.out}/rejects.jsonl", highlight=False)
    for line in input_warning_lines(m["unhashed"]["input_warnings"]):
        console.err.print(f"[yellow]warning:[/] {line}", highlight=False, soft_wrap=True)


def _rendering_line(rendering: dict) -> str:
    """The engine that rendered, how many renders each engine did, and a cross-check difference in words."""
    records = rendering["records"]
    line = rendering["engine"]
    if records["minijinja"]:
        line += (f" ({records['minijinja']:,} renders, jinja2 {records['jinja2']:,}; cross-checked "
                 f"{records['checked']:,})")
    else:
        line += f": {rendering['reason']}"
    if records["mismatches"]:
        line += f" [yellow]{rendering['note']}[/]"
    return line


def _template_line(template: dict, note: str) -> str:
    name = template.get("name")
    line = f"{template['origin']} ({name})" if name and name != "default" else template["origin"]
    return f"{line}: {note}" if note else line


def input_warning_lines(warnings: dict) -> list[str]:
    """The warnings about records that were packed anyway, in words."""
    lines = []
    if warnings["ambiguous_records"]:
        lines.append(f"{warnings['ambiguous_records']:,} records hold more than one of messages, conversations, "
                     f"prompt/completion and text, and were read by that precedence (first: "
                     f"{warnings['first_ambiguous']}); the seam table's format column says which was used")
    if warnings["ignored_fields"]:
        fields = ", ".join(f"{name} ({count:,} records)" for name, count in warnings["ignored_fields"].items())
        lines.append(f"fields the template never reads: {fields}")
    for path, columns in warnings.get("column_types", {}).items():
        lines.append(f"{path}: columns whose type cannot hold the JSON they came from, so a template that prints "
                     f"them renders other text (store them as JSON strings to keep them exact): {'; '.join(columns)}")
    return lines


def sources_table(inputs: list[dict]) -> Table:
    """Per input (by its location-free name, as the manifest has it): records read, the mixture's
    weight, examples in packs (copies included), what was left out."""
    columns = [Col("source", "left", 9), Col("records", keep=7), Col("mix", keep=6), Col("examples", keep=8),
               Col("rejected", keep=4), Col("duplicate", keep=3), Col("unsampled", keep=3), Col("dropped", keep=2),
               Col("tokens", keep=5)]
    rows = [[i["source"], f"{i['records']:,}", i["weight"] or "-", f"{i['packed'] + i['truncated']:,}",
             f"{i['rejected']:,}", f"{i['duplicate']:,}", f"{i['unsampled']:,}", f"{i['dropped']:,}",
             f"{i['tokens']:,}"] for i in inputs]
    return fitted_table("sources (examples: in packs, copies included)", columns, rows)


def render_verify(outcome, *, as_json: bool) -> None:  # noqa: ANN001 - a VerifyOutcome (imported lazily)
    """Print a verify run's report and the optional checks' (`packcli.verify.request.VerifyOutcome`)."""
    report, attention, consumers, ok = outcome.report, outcome.attention, outcome.consumers, outcome.ok
    if as_json:
        data = report.to_dict()
        if attention is not None:
            data["attention"] = attention.to_dict()
        if consumers:
            data["consumers"] = [c.to_dict() for c in consumers]
        data["ok"] = ok
        console.print_json(flagged(data))
        return
    table = Table(title=f"verify {report.directory}", title_justify="left")
    for col in ("check", "checked", "violations", "result"):
        table.add_column(col, justify="right" if col in ("checked", "violations") else "left")
    for c in report.checks:
        verdict = "[green]ok[/]" if c.ok else (f"[yellow]skipped[/]: {c.skipped}" if c.skipped else "[red]FAIL[/]")
        table.add_row(c.name, f"{c.checked:,}", f"{c.count:,}", verdict)
    if attention is not None:
        for b in attention.results:
            table.add_row(f"attention:{b.backend}", f"{len(b.packs)} packs", "-", "[green]ok[/]" if b.ok else "[red]FAIL[/]")
    for c in consumers:
        table.add_row(c.result.name, f"{c.result.checked:,} batches", f"{c.result.count:,}",
                      "[green]ok[/]" if c.ok else "[red]LEAKS[/]")
    console.out.print(table)
    for c in report.checks:
        for v in c.violations:
            # escaped, no emoji: a message holds token lists ("[1, -100]") and places ("data.jsonl:100:")
            console.out.print(f"[red]{c.name}[/]: {escape(v.where())}: {escape(as_flags(v.message))}", highlight=False,
                              soft_wrap=True, emoji=False)
        if c.count > len(c.violations):
            console.out.print(f"  ... and {c.count - len(c.violations)} more {c.name} violations")
        if c.note:
            console.out.print(f"{c.name}: {escape(as_flags(c.note))}", highlight=False, soft_wrap=True, emoji=False)
    if attention is not None:
        render_attention(attention)
    for c in consumers:
        render_consumer(c)
    console.out.print("[bold green]all invariants hold[/]" if ok else "[bold red]violations found[/]")
    console.out.print("")


def render_self_test(outcome, *, as_json: bool) -> None:  # noqa: ANN001 - a VerifyOutcome (imported lazily)
    """Print the negative-control table of a self-test run: each fault must be caught."""
    results = outcome.self_test
    if as_json:
        console.print_json(flagged({"ok": outcome.ok, "faults": [vars(r) for r in results]}))
        return
    table = Table(title="verify --self-test: each fault must be caught", title_justify="left")
    for col in ("fault", "caught by", "result", "message"):
        table.add_column(col, overflow="fold")
    for r in results:
        verdict = "[green]caught[/]" if r.caught else "[yellow]n/a[/]" if not r.applies else "[red]MISSED[/]"
        table.add_row(r.name, r.check, verdict, escape(as_flags(r.message)))
    console.out.print(table)


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for key, value in rows:
        table.add_row(key, value)
    return table


def _quantile_table(stats) -> Table:  # noqa: ANN001
    keys = list(stats.total.values)
    needed = {"p50": 9, "p90": 8, "p99": 8, "max": 8, "mean": 7, "p99.9": 6, "p75": 5, "p25": 4, "p5": 3}
    columns = [Col("", "left", 10), *(Col(k, keep=needed.get(k, 5)) for k in keys)]
    rows = [["total", *(f"{stats.total.values[k]:,.0f}" for k in keys)],
            ["supervised", *(f"{stats.supervised.values.get(k, 0):,.0f}" for k in keys)]]
    return fitted_table("token-length quantiles", columns, rows)


def render_length_stats(stats, *, as_json: bool, plot) -> None:  # noqa: ANN001
    from packcli.stats import terminal_histogram

    if plot is not None:
        from packcli.plots import plot_stats

        cap = stats.recommendation.capacity
        plot_stats(plot, lengths=stats.lengths, capacity=cap, quantiles=stats.total.values, sweep=stats.what_if,
                   title=f"{stats.examples:,} examples", recommended=stats.recommendation.strategy)
    if as_json:
        data = stats.to_dict()
        data["plot"] = str(plot) if plot else None
        data["recommendation"] = flagged(data["recommendation"])
        console.print_json(data)
        return
    console.out.print(_kv_table("records", [("records", f"{stats.records:,}"), ("tokenized", f"{stats.examples:,}"),
                                            ("rejected", f"{stats.rejected:,}"),
                                            ("tokenizer backend", stats.tokenization.get("backend", "?"))]))
    if len(stats.by_input) > 1:
        columns = [Col("source", "left", 9), Col("records", keep=8), Col("tokenized", keep=7), Col("rejected", keep=6)]
        console.out.print(fitted_table("sources", columns, [[i["source"], f"{i['records']:,}", f"{i['examples']:,}",
                                                             f"{i['rejected']:,}"] for i in stats.by_input]))
    for reason, count in list(stats.rejected_reasons.items())[:10]:
        console.out.print(f"  rejected {count:>6}: {reason}", highlight=False)
    if not stats.examples:
        return
    console.out.print(_quantile_table(stats))
    console.out.print("\n".join(terminal_histogram(stats.lengths)), highlight=False)
    columns = [Col("capacity", keep=9), Col("strategy", "left", 9), Col("packs", keep=6), Col("density", keep=8),
               Col("sup. density", keep=3), Col("dropped examples", keep=2), Col("dropped supervised", keep=7),
               Col("mean displ.", keep=5)]
    rows = [[f"{w.capacity:,}", w.strategy, f"{w.packs:,}", f"{w.density:.4f}", f"{w.supervised_density:.4f}",
             f"{w.dropped_examples:,}", f"{w.dropped_supervised_fraction:.3%}", f"{w.displacement_mean:,.1f}"]
            for w in stats.what_if]
    table = fitted_table("what-if (over-long examples dropped; displacement: mean examples moved)", columns, rows)
    console.out.print(table)
    over = {c.capacity for c in stats.overlong if c.policy == "drop" and c.examples < stats.examples}
    if over:
        console.out.print(overlong_table([c for c in stats.overlong if c.capacity in over]))
    rec = stats.recommendation
    console.out.print(f"[bold]recommendation:[/] {as_flags(rec.reason)}", highlight=False)
    if plot:
        console.err.print(f"plot written to {plot}")


def overlong_table(cells) -> Table:  # noqa: ANN001 - list[PolicyWhatIf]
    """What --overlong drop, truncate and split keep at each capacity."""
    columns = [Col("capacity", keep=9), Col("--overlong", "left", 9), Col("examples", keep=8), Col("segments", keep=4),
               Col("tokens", keep=7), Col("supervised", keep=6), Col("of all sup.", keep=5), Col("packs", keep=3),
               Col("density", keep=2)]
    rows = [[f"{c.capacity:,}", c.policy, f"{c.examples:,}", f"{c.segments:,}", f"{c.tokens:,}", f"{c.supervised:,}",
             f"{c.supervised_fraction:.3%}", f"{c.packs:,}", f"{c.density:.4f}"] for c in cells]
    return fitted_table("over-long examples: what each policy keeps (default strategy; segments: examples or "
                        "chunks)", columns, rows)


def render_artifact_stats(stats, *, as_json: bool, plot) -> None:  # noqa: ANN001
    if plot is not None:
        from packcli.plots import plot_stats
        from packcli.stats import Quantiles

        plot_stats(plot, lengths=stats.lengths, capacity=stats.identity["config"]["capacity"],
                   quantiles=Quantiles.of(stats.lengths).values, fill=stats.fill,
                   supervised_fill=stats.supervised_fill, title=stats.directory)
    if as_json:
        data = stats.to_dict()
        data["plot"] = str(plot) if plot else None
        console.print_json(data)
        return
    c, m = stats.counts, stats.metrics
    console.out.print(_kv_table(f"artifact {stats.directory}", [
        ("packs", f"{c['packs']:,}"), ("tokens / supervised", f"{c['tokens']:,} / {c['supervised_tokens']:,}"),
        ("density / supervised density", f"{m['density']:.4f} / {m['supervised_density']:.4f}"),
        ("gap to lower bound", f"{m['gap_to_bound']:.4%}"),
        ("records", f"{c['records']:,}"), ("packed / truncated", f"{c['packed']:,} / {c['truncated']:,}"),
        ("dropped / rejected", f"{c['dropped']:,} / {c['rejected']:,}"),
        ("duplicate / unsampled", f"{c['duplicate']:,} / {c['unsampled']:,}"),
        ("tokens lost (dropped+truncated)", f"{c['tokens_lost']:,}"),
        ("supervised tokens lost", f"{c['supervised_tokens_lost']:,}"),
        ("displacement mean / p99 / max", f"{m['displacement_mean']:.1f} / {m['displacement_p99']:.0f} / "
                                          f"{m['displacement_max']:.0f}"),
    ]))
    columns = [Col("shard", "left", 9), Col("packs", keep=8), Col("examples", keep=6), Col("tokens", keep=7),
               Col("supervised", keep=4), Col("density", keep=8), Col("bytes", keep=2)]
    rows = [[s["name"].removeprefix("shard-").removesuffix(".parquet"), f"{s['packs']:,}", f"{s['examples']:,}",
             f"{s['tokens']:,}", f"{s['supervised']:,}", f"{s['density']:.4f}", f"{s['bytes']:,}"] for s in stats.shards]
    table = fitted_table("shards", columns, rows)
    console.out.print(table)
    if len(stats.inputs) > 1 or stats.identity["config"].get("mix"):
        console.out.print(sources_table(stats.inputs))
    ident = stats.identity
    console.out.print(_kv_table("identity", [
        ("manifest", ident["manifest_sha256"][:16]), ("contract", str(ident["contract_version"])),
        ("tokenizer", ident["tokenizer_sha256"][:16]), ("template", f"{ident['template_sha256'][:16]} "
                                                                    f"({ident['template_origin']})"),
        ("loss", ident["loss_policy"]), *((k, v) for k, v in ident["versions"].items())]))


def render_attention(report) -> None:  # noqa: ANN001 - AttentionReport
    """Per backend: the largest differences against the unpacked control, and the controls."""
    table = Table(title="attention: packed vs each example alone", title_justify="left")
    # max |logit diff|, max per-token loss diff, max q_proj gradient diff as a fraction of its bound (ok <= 1)
    for col in ("backend", "dtype", "logit Δ", "loss Δ", "grad Δ/bound", "neighbour", "cont. pos.", "result"):
        table.add_column(col, justify="right" if "Δ" in col else "left", no_wrap=True)
    for b in report.results:
        logit = max((max(p.logits_max_diff) for p in b.packs), default=0.0)
        loss = max((p.token_loss_max_diff for p in b.packs), default=0.0)
        grads = [p.grad_weight_max_diff / p.grad_weight_bound for p in b.packs if p.grad_weight_bound]
        neighbour = [p.neighbour for p in b.packs if p.neighbour is not None]
        table.add_row(b.backend, b.dtype, f"{logit:.2e}", f"{loss:.2e}", f"{max(grads):.2e}" if grads else "-",
                      ("same" if not any(n.moved for n in neighbour) else "[red]MOVED[/]") if neighbour else "-",
                      "caught" if all(p.rotary.continued_detected for p in b.packs) else "[red]missed[/]",
                      "[green]ok[/]" if b.ok else "[red]LEAKS[/]")
    console.out.print(table)
    for b in report.results:
        for line in b.evidence[:5]:
            console.out.print(f"  {b.backend}: {line}", highlight=False, soft_wrap=True)
    for name, why in report.skipped:
        console.out.print(f"  skipped {name}: {as_flags(why)}", highlight=False)


def render_consumer(report) -> None:  # noqa: ANN001 - ConsumerReport
    """What ran, the first problems, and (when it leaks) why and what to change."""
    versions = ", ".join(f"{k} {v}" for k, v in report.versions.items())
    console.out.print(f"{report.result.name}: ran {report.runs} ({versions})", highlight=False, soft_wrap=True)
    for v in report.result.violations:
        console.out.print(f"  [red]{report.result.name}[/]: {as_flags(v.message)}", highlight=False, soft_wrap=True)
    if report.result.count > len(report.result.violations):
        console.out.print(f"  ... and {report.result.count - len(report.result.violations)} more")
    if report.advice:
        console.out.print(f"  [bold]why and what to change[/]: {as_flags(report.advice)}", highlight=False,
                          soft_wrap=True)


# Two shades per kind, alternating token by token so boundaries show; green where the token carries loss.
# Greys that differ on a 256-colour terminal are one colour on an 8/16-colour one, so there the
# alternation is underlined / not underlined instead.
SHADES = {
    "256": {False: ("on grey23", "on grey35"), True: ("black on green3", "black on dark_sea_green2")},
    "standard": {False: ("default", "underline"), True: ("black on green", "black on green underline")},
}



def render_shown(shown) -> None:  # noqa: ANN001 - packcli.view.Shown
    """`packcli show` on a terminal: each example's tokens in alternating shades, its seam-table row, its pack."""
    from rich.text import Text

    console.out.print(f"[bold]{shown.directory}[/]  template {shown.template}  loss {shown.loss_policy}",
                      highlight=False, soft_wrap=True)
    shades = token_shades(console.out.color_system)
    for example in shown.examples:
        row = example.row
        chunk = f"  {example.chunk_label}" if example.chunk_label else ""
        console.out.rule(f"example {row['example_id']}  {row['source']}:{row['line']}  {row['status']}{chunk}",
                         align="left")
        if example.tokens:
            text = Text()
            for k, token in enumerate(example.tokens):
                piece = token.text.replace("\n", "↵\n").replace("\t", "→") or "·"
                text.append(piece, style=shades[token.supervised][k % 2])
            console.out.print(text, soft_wrap=True)
            supervised = sum(t.supervised for t in example.tokens)
            console.out.print(f"{len(example.tokens):,} tokens, {supervised:,} supervised (green); a shade per token",
                              highlight=False)
        else:
            console.out.print(f"not in a pack ({row['status']}{': ' + row['reason'] if row['reason'] else ''})",
                              highlight=False, soft_wrap=True)
        if not shown.whole_pack:  # one example: its whole row; a pack's rows are its seam table, below
            table = Table(title="seam-table row", show_header=False, title_justify="left")
            for key, value in row.items():
                table.add_row(key, str(value))
            console.out.print(table)
    if shown.pack is not None:
        chosen = set() if shown.whole_pack else {e.row["example_id"] for e in shown.examples}
        table = Table(title=f"pack {shown.pack.index} ({shown.pack.shard} row {shown.pack.row}, "
                            f"{shown.pack.num_tokens:,} tokens)", title_justify="left")
        for col in ("offset", "length", "supervised", "example_id", "source:line"):
            table.add_column(col, justify="right" if col in ("offset", "length", "supervised") else "left",
                             overflow="fold")
        for seam in shown.pack.seams:
            where = f"{seam['source']}:{seam['line']}" + (f" chunk {seam['chunk']}" if seam["chunk"] else "")
            table.add_row(str(seam["offset"]), str(seam["length"]), str(seam["supervised"]), str(seam["example_id"]),
                          where, style="bold" if seam["example_id"] in chosen else None)
        console.out.print(table)


def token_shades(color_system: str | None) -> dict[bool, tuple[str, str]]:
    """The alternating styles for this terminal: greys where it has 256 colours or more, underlining
    where it has 8 or 16 (its greys would be one colour)."""
    return SHADES["256" if color_system in ("256", "truecolor") else "standard"]
