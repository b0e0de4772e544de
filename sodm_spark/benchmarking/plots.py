"""PNG plots of a benchmark run (matplotlib, Agg backend):

* accuracy against fit seconds, one point per SODM level and a line per partitioner, the other
  methods as single points (the SODM paper's Figure 1);
* speed-up against cores, per level and for the whole fit (Figure 2);
* seconds against rows M, log-log, a line per method / SODM level (the scaling run).
"""
from __future__ import annotations

from pathlib import Path

from .budget import OK
from .scaling import speedups

MARKERS = "osD^v<>Ph*Xd"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _not_finished_note(ax, rows, what="not finished within the budget"):
    names = sorted({r["name"] for r in rows if r["status"] != OK and r.get("final", True)})
    if names:
        ax.text(0.01, 0.01, f"N/A ({what}): " + ", ".join(names), transform=ax.transAxes,
                fontsize=8, color="0.3", va="bottom")


def plot_accuracy_vs_seconds(rows: list[dict], path, title: str) -> None:
    """Figure 1 style: accuracy (y) against fit seconds (x, log)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    finished = [r for r in rows if r["status"] == OK and r["accuracy"] is not None]
    sodm = {}
    for row in finished:
        if row["method"] == "sodm":
            sodm.setdefault(row["name"], []).append(row)
    for name, levels in sodm.items():
        levels = sorted(levels, key=lambda r: r["fit_seconds"])
        x = [r["fit_seconds"] for r in levels]
        y = [r["accuracy"] for r in levels]
        line, = ax.plot(x, y, "-o", label=f"{name} (levels {levels[0]['level']}→"
                        f"{levels[-1]['level']})", linewidth=2)
        for r in levels:
            ax.annotate(f"L{r['level']}", (r["fit_seconds"], r["accuracy"]), fontsize=8,
                        xytext=(4, -10), textcoords="offset points", color=line.get_color())
    others = [r for r in finished if r["method"] != "sodm"]
    for index, row in enumerate(others):
        ax.plot(row["fit_seconds"], row["accuracy"], MARKERS[index % len(MARKERS)],
                markersize=9, label=f"{row['name']} ({row['runs_on']})")
    ax.set_xscale("log")
    ax.set_xlabel("fit seconds (log scale; SODM: cumulative to each level)")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    _not_finished_note(ax, rows)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    _save(fig, path)


def plot_speedup_vs_cores(rows: list[dict], path, title: str) -> None:
    """Figure 2 style: seconds and speed-up against cores, per SODM level and overall."""
    plt = _pyplot()
    table = speedups(rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    for depth in sorted({r["depth"] for r in table}, key=lambda d: (d is None, d)):
        points = [r for r in table if r["depth"] == depth]
        label = "whole fit" if depth is None else \
            f"level {points[0]['level']} ({points[0]['partitions']} partitions)"
        style = "-ks" if depth is None else "-o"
        cores = [r["cores"] for r in points]
        left.plot(cores, [r["seconds"] for r in points], style, label=label)
        right.plot(cores, [r["speedup"] for r in points], style, label=label)
    all_cores = sorted({r["cores"] for r in table}) or [1]
    right.plot(all_cores, [c / all_cores[0] for c in all_cores], ":", color="0.5",
               label="ideal (linear)")
    for ax, ylabel in ((left, "seconds"), (right, f"speed-up over {all_cores[0]} core(s)")):
        ax.set_xlabel("executor cores")
        ax.set_ylabel(ylabel)
        ax.set_xticks(all_cores)
        ax.grid(True, alpha=0.3)
    left.set_yscale("log")
    left.set_title("SODM seconds")
    right.set_title("SODM speed-up")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def plot_seconds_vs_rows(rows: list[dict], path, title: str, budget=None) -> None:
    """Seconds against M (log-log): SODM per level depth and overall, and the other methods;
    a method that did not finish is drawn as an x on the budget line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    series = {}
    for row in rows:
        if row["method"] == "sodm" and row.get("depth") is not None and row["status"] == OK:
            key = (0, row["depth"], f"SODM level top−{row['depth']}" if row["depth"]
                   else "SODM top level")
            series.setdefault(key, []).append((row["rows"], row["level_seconds"],
                                               row.get("rows_per_partition")))
            if row.get("final"):
                series.setdefault((1, 0, "SODM whole fit (partitioning included)"), []).append(
                    (row["rows"], row["fit_seconds"], None))
        elif row["method"] != "sodm":
            value = row["fit_seconds"] if row["status"] == OK else None
            series.setdefault((2, 0, row["name"]), []).append((row["rows"], value, None))
    for index, ((group, _, name), points) in enumerate(sorted(series.items())):
        points.sort()
        done = [(m, s) for m, s, _ in points if s is not None]
        sizes = sorted({p for _, _, p in points if p})
        label = name + (f" (~{min(sizes):,}–{max(sizes):,} rows/partition)" if sizes else "")
        marker = MARKERS[index % len(MARKERS)]
        line = None
        if done:
            line, = ax.plot(*zip(*done), marker=marker, label=label,
                            linestyle="-" if group < 2 else "--")
        failed = [m for m, s, _ in points if s is None]
        if failed and budget:
            ax.plot(failed, [budget] * len(failed), "x", markersize=11, mew=2,
                    color=None if line is None else line.get_color(),
                    label=f"{name}: not finished (N/A)")
    if budget:
        ax.axhline(budget, color="0.5", linestyle=":", linewidth=1)
        ax.text(ax.get_xlim()[0], budget, f" budget {budget:g} s", va="bottom", fontsize=8,
                color="0.4")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training rows M (log scale)")
    ax.set_ylabel("seconds (log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path) -> None:
    import matplotlib.pyplot as plt

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

