"""The only module that imports matplotlib (lazily, with the non-interactive Agg backend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.owned import PLOT_CREATOR, write_replacing

PLOT_SUFFIXES = (".png", ".pdf", ".svg")  # what --plot may name: formats matplotlib writes without extras


def plot_stats(path: Path, *, lengths: npt.NDArray[np.int64], capacity: int | None, quantiles: dict[str, float],
               fill: npt.NDArray[np.float64] | None = None, supervised_fill: npt.NDArray[np.float64] | None = None,
               sweep=None, title: str = "") -> Path:  # noqa: ANN001
    """Length histogram (quantiles and capacity marked), pack fill and supervised density per pack,
    capacity sweep.

    Panels without data (no fill for raw data before packing, no sweep for an artifact) are left out.
    Fill is zoomed to the range the packs occupy: dense packing puts nearly every pack within a
    fraction of a percent of full, which a 0-1 axis would show as one bar against its edge.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_fill = fill is not None and len(fill) > 0
    panels = ["lengths"] + (["fill", "supervised"] if has_fill else []) + (["sweep"] if sweep else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    axes = dict(zip(panels, axes[0]))

    ax = axes["lengths"]
    if len(lengths):
        bins = np.logspace(np.log10(max(1, lengths.min())), np.log10(max(2, lengths.max())), 50)
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

    if has_fill:
        for key, values, label, color in (("fill", fill, "pack fill (tokens / capacity)", "#55A868"),
                                          ("supervised", supervised_fill, "supervised tokens / capacity", "#8172B2")):
            ax = axes[key]
            ax.hist(values, bins=_zoomed_bins(values), color=color)
            mean = float(np.mean(values))
            ax.axvline(mean, color="#333333", linestyle="--", label=f"mean {mean:.4f}")
            ax.legend(loc="upper left")
            ax.set_xlabel(label)
            ax.set_ylabel("packs")
            ax.set_title("pack fill" if key == "fill" else "supervised density per pack")

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
    fmt = Path(path).suffix.lstrip(".").lower()
    # Named inside the file, so a later --plot may replace it and no other file (`packcli.owned`).
    metadata = {"Software": PLOT_CREATOR} if fmt == "png" else {"Creator": PLOT_CREATOR}
    try:
        path = write_replacing(Path(path), lambda partial: fig.savefig(partial, dpi=110, format=fmt, metadata=metadata))
    finally:
        plt.close(fig)
    return path


def _zoomed_bins(values: npt.NDArray[np.float64], count: int = 40) -> npt.NDArray[np.float64]:
    """Bin edges over the range the values occupy (from their 1st percentile to their maximum),
    never narrower than a thousandth, so a pile of packs at 0.999 is resolved, not one bar."""
    lo, hi = float(np.percentile(values, 1)), float(np.max(values))
    if hi - lo < 1e-3:
        lo = max(0.0, hi - 1e-3)
    return np.linspace(lo, hi + 1e-9, count + 1)
