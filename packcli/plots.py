"""The only module that imports matplotlib (lazily, with the non-interactive Agg backend).

Drawn to be read at a glance: token axes read as tokens (``1k``, ``4k``, ``32k``) on powers of two;
every pack is in the artifact's histograms, with unused slots on a symmetric-log axis so that a pile
of packs one token short of full and the one pack a seventh full are both visible; the recommended
capacity is marked on the lengths and on the sweep; strategies whose lines coincide in the sweep
(``window`` often equals ``bfd``) are drawn with nested hollow markers and distinct dashes, so each
stays visible. docs/stats-and-show.md describes each panel as rendered.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.owned import PLOT_CREATOR, write_replacing

PLOT_SUFFIXES = (".png", ".pdf", ".svg")  # what --plot may name: formats matplotlib writes without extras
# One look per strategy, largest marker drawn first: where lines coincide, every marker still shows.
STRATEGY_STYLES = (("o", 11, "-"), ("s", 8, "--"), ("^", 6, "-."), ("D", 4, ":"), ("v", 3, (0, (1, 3))))
CAPACITY_COLOR = "#C44E52"


def token_label(n: float) -> str:
    """Tokens as a person reads them: ``512``, ``1k``, ``1.5k``, ``32k``, ``1M`` (k = 1024, as capacities are)."""
    n = float(n)
    for unit, size in (("M", 1 << 20), ("k", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}" if abs(n) >= 10 or n == int(n) else f"{n:.2g}"


def plot_stats(path: Path, *, lengths: npt.NDArray[np.int64], capacity: int | None, quantiles: dict[str, float],
               fill: npt.NDArray[np.float64] | None = None, supervised_fill: npt.NDArray[np.float64] | None = None,
               sweep=None, title: str = "", recommended: str | None = None) -> Path:  # noqa: ANN001
    """Length histogram (quantiles and capacity marked), unused slots and supervised tokens per pack,
    capacity sweep.

    Panels without data (no fill for raw data before packing, no sweep for an artifact) are left out.
    ``recommended``: the strategy ``capacity`` is recommended with (raw data), marked on the sweep.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_fill = fill is not None and len(fill) > 0
    panels = ["lengths"] + (["fill", "supervised"] if has_fill else []) + (["sweep"] if sweep else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.8), squeeze=False)
    axes = dict(zip(panels, axes[0]))
    label = (f"recommended capacity {token_label(capacity)}" + (f" ({recommended})" if recommended else "")
             if sweep else f"capacity {token_label(capacity)}") if capacity else ""
    _lengths_panel(axes["lengths"], lengths, quantiles, capacity, label)
    if has_fill:
        _fill_panels(axes["fill"], axes["supervised"], fill, supervised_fill, capacity)
    if "sweep" in axes:
        _sweep_panel(axes["sweep"], sweep, capacity, recommended)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fmt = Path(path).suffix.lstrip(".").lower()
    # Named inside the file, so a later --plot may replace it and no other file (`packcli.owned`).
    metadata = {"Software": PLOT_CREATOR} if fmt == "png" else {"Creator": PLOT_CREATOR}
    try:
        path = write_replacing(Path(path), lambda partial: fig.savefig(partial, dpi=110, format=fmt, metadata=metadata))
    finally:
        plt.close(fig)
    return path


def _token_axis(axis, lo: float, hi: float, *, log: bool = True) -> None:  # noqa: ANN001 - a matplotlib Axis
    """Ticks on powers of two between ``lo`` and ``hi`` (at most 8 of them), labelled as tokens."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    if log:
        first, last = int(np.floor(np.log2(max(lo, 1)))), int(np.ceil(np.log2(max(hi, 2))))
        step = max(1, -(-(last - first + 1) // 8))
        axis.set_major_locator(FixedLocator([2.0 ** k for k in range(first, last + 1, step)]))
    else:  # quarters of the range: 0, 256, 512, 768, 1k for a capacity of 1k
        axis.set_major_locator(FixedLocator(np.linspace(lo, hi, 5)))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda value, _: token_label(value)))


def _lengths_panel(ax, lengths, quantiles: dict[str, float], capacity: int | None, label: str) -> None:  # noqa: ANN001
    if len(lengths):
        lo, hi = max(1, int(lengths.min())), max(2, int(lengths.max()))
        ax.hist(lengths, bins=np.geomspace(lo, hi * 1.0001, 50), color="#4C72B0")
        ax.set_xscale("log", base=2)
        _token_axis(ax.xaxis, lo, max(hi, capacity or 0))
    for name, value in quantiles.items():
        if name in ("p50", "p90", "p99"):
            ax.axvline(value, color="#555555", linestyle="--", linewidth=1)
            ax.text(value, ax.get_ylim()[1] * 0.98, f" {name}={token_label(value)}", rotation=90, va="top",
                    fontsize=8, bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1})
    if capacity:
        ax.axvline(capacity, color=CAPACITY_COLOR, linewidth=2, label=label)
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel("tokens per example")
    ax.set_ylabel("examples")
    ax.set_title("example length")


def _fill_panels(fill_ax, sup_ax, fill, supervised_fill, capacity: int | None) -> None:  # noqa: ANN001
    """Every pack: its unused slots (symmetric log: 0, 1, 4, ... tokens) and its supervised tokens."""
    capacity = capacity or 1
    unused = np.rint((1 - np.asarray(fill, np.float64)) * capacity)
    edges = unused_slot_bins(unused)
    top = float(edges[-1])
    fill_ax.hist(unused, bins=edges, color="#55A868", edgecolor="white", linewidth=0.5)
    fill_ax.set_xscale("symlog", linthresh=1, linscale=0.4)
    fill_ax.set_xlim(-0.6, top)
    _token_axis(fill_ax.xaxis, 1, top)
    ticks = [0.0] + [t for t in fill_ax.xaxis.get_majorticklocs() if t >= 1]
    from matplotlib.ticker import FixedLocator

    fill_ax.xaxis.set_major_locator(FixedLocator(ticks))
    mean, low = float(np.mean(fill)), float(np.min(fill))
    fill_ax.axvline(float(np.mean(unused)), color="#333333", linestyle="--",
                    label=f"mean fill {mean:.4f} ({token_label(float(np.mean(unused)))} unused)")
    fill_ax.plot([], [], " ", label=f"{len(unused):,} packs, every one drawn")
    fill_ax.legend(loc="upper right", fontsize=8)
    fill_ax.annotate(f"least full: {low:.3f}", xy=(float(unused.max()), 0.5), xytext=(0, 28),
                     textcoords="offset points", ha="right", fontsize=8, arrowprops={"arrowstyle": "->", "lw": 0.8})
    fill_ax.set_xlabel(f"unused slots per pack (tokens of {token_label(capacity)})")
    fill_ax.set_ylabel("packs")
    fill_ax.set_title("pack fill")

    supervised = np.asarray(supervised_fill, np.float64) * capacity
    sup_ax.hist(supervised, bins=np.linspace(0, capacity, 41), color="#8172B2")
    sup_ax.set_xlim(0, capacity)
    _token_axis(sup_ax.xaxis, 0, capacity, log=False)
    sup_mean = float(np.mean(supervised))
    sup_ax.axvline(sup_mean, color="#333333", linestyle="--",
                   label=f"mean {token_label(sup_mean)} ({float(np.mean(supervised_fill)):.4f} of capacity)")
    sup_ax.legend(loc="upper left", fontsize=8)
    sup_ax.set_xlabel("supervised tokens per pack")
    sup_ax.set_ylabel("packs")
    sup_ax.set_title("supervised tokens per pack")


def unused_slot_bins(unused: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Bin edges for unused slots per pack that hold every pack: a bar each for 0 and 1 unused slot, then
    geometric bins past the emptiest pack, so a pile one token short of full and a pack a seventh full both show."""
    top = max(4.0, float(np.max(unused, initial=0)) * 1.3)
    return np.concatenate([[-0.5, 0.5, 1.5], np.geomspace(2.5, top, 30)])


def _sweep_panel(ax, sweep, capacity: int | None, recommended: str | None) -> None:  # noqa: ANN001
    strategies = sorted({c.strategy for c in sweep})
    for k, strategy in enumerate(strategies):
        marker, size, dashes = STRATEGY_STYLES[k % len(STRATEGY_STYLES)]
        cells = sorted((c for c in sweep if c.strategy == strategy), key=lambda c: c.capacity)
        ax.plot([c.capacity for c in cells], [c.density for c in cells], marker=marker, markersize=size,
                markerfacecolor="none", markeredgewidth=1.5, linestyle=dashes, linewidth=2.2 - 0.35 * k,
                label=strategy, zorder=2 + k)
    caps = sorted({c.capacity for c in sweep})
    ax.set_xscale("log", base=2)
    _token_axis(ax.xaxis, caps[0], caps[-1])
    ax.set_xlabel("capacity (tokens)")
    ax.set_ylabel("density (real tokens / slots)")
    ax.set_ylim(0, 1.05)
    if capacity:
        ax.axvline(capacity, color=CAPACITY_COLOR, linewidth=2, alpha=0.6,
                   label=f"recommended {token_label(capacity)}" + (f" ({recommended})" if recommended else ""))
        chosen = [c for c in sweep if c.capacity == capacity and c.strategy == recommended]
        if chosen:
            ax.plot([capacity], [chosen[0].density], marker="*", markersize=16, color=CAPACITY_COLOR, zorder=20,
                    linestyle="none")
    ax2 = ax.twinx()
    lost = [next(c.dropped_supervised_fraction for c in sweep if c.capacity == cap) * 100 for cap in caps]
    ax2.plot(caps, lost, color="black", linestyle=":", marker="x", label="supervised dropped (%, right)")
    ax2.set_ylabel("supervised tokens dropped as over-long (%)")
    ax2.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)
    ax.set_title("capacity sweep (overlapping strategies: nested markers)")
