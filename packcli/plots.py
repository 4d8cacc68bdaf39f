"""The only module that imports matplotlib (lazily, with the non-interactive Agg backend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

PLOT_SUFFIXES = (".png", ".pdf", ".svg")  # what --plot may name: formats matplotlib writes without extras


def plot_stats(path: Path, *, lengths: npt.NDArray[np.int64], capacity: int | None, quantiles: dict[str, float],
               fill: npt.NDArray[np.float64] | None = None, sweep=None, title: str = "") -> Path:  # noqa: ANN001
    """Length histogram (quantiles and capacity marked), pack-fill histogram, capacity sweep.

    Panels without data (no fill for raw data before packing, no sweep for an artifact) are left out.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ["lengths"] + (["fill"] if fill is not None and len(fill) else []) + (["sweep"] if sweep else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    axes = dict(zip(panels, axes[0]))

    ax = axes["lengths"]
    if len(lengths):
        bins = np.logspace(0, np.log10(max(2, lengths.max())), 50)
        ax.hist(lengths, bins=bins, color="#4C72B0")
        ax.set_xscale("log")
    for name, value in quantiles.items():
        if name in ("p50", "p90", "p99"):
            ax.axvline(value, color="#555555", linestyle="--", linewidth=1)
            ax.text(value, ax.get_ylim()[1] * 0.98, f" {name}={value:,.0f}", rotation=90, va="top", fontsize=8,
                    bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1})
    if capacity:
        ax.axvline(capacity, color="#C44E52", linewidth=2, label=f"capacity {capacity:,}")
        ax.legend(loc="upper left")
    ax.set_xlabel("tokens per example (log scale)")
    ax.set_ylabel("examples")
    ax.set_title("example length")

    if "fill" in axes:
        ax = axes["fill"]
        ax.hist(fill, bins=np.linspace(0, 1, 41), color="#55A868")
        ax.axvline(float(np.mean(fill)), color="#333333", linestyle="--", label=f"mean fill {np.mean(fill):.3f}")
        ax.legend(loc="upper left")
        ax.set_xlabel("pack fill (tokens / capacity)")
        ax.set_ylabel("packs")
        ax.set_title("pack fill")

    if "sweep" in axes:
        ax = axes["sweep"]
        for strategy in sorted({c.strategy for c in sweep}):
            cells = sorted((c for c in sweep if c.strategy == strategy), key=lambda c: c.capacity)
            ax.plot([c.capacity for c in cells], [c.density for c in cells], marker="o", label=strategy)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("capacity (tokens)")
        ax.set_ylabel("density (real tokens / slots)")
        ax.set_ylim(0, 1.02)
        ax2 = ax.twinx()
        caps = sorted({c.capacity for c in sweep})
        lost = [next(c.dropped_supervised_fraction for c in sweep if c.capacity == cap) * 100 for cap in caps]
        ax2.plot(caps, lost, color="black", linestyle=":", marker="x", label="supervised dropped (%, right)")
        ax2.set_ylabel("supervised tokens dropped as over-long (%)")
        ax2.set_ylim(bottom=0)
        handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
        labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)
        ax.set_title("capacity sweep")

    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")  # the plot appears whole, or not at all
    try:
        fig.savefig(partial, dpi=110, format=path.suffix.lstrip(".").lower())
        partial.replace(path)
    finally:
        plt.close(fig)
        partial.unlink(missing_ok=True)
    return path
