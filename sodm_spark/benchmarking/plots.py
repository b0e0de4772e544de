"""PNG plots of a benchmark run (matplotlib, Agg backend):

* accuracy against fit seconds, one point per SODM level and a line per partitioner, the other
  methods as single points and the Pareto front (the SODM paper's Figure 1);
* speed-up against cores, per level and for the whole fit (Figure 2);
* seconds against rows M, log-log, a line per method / SODM level (the scaling run).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ..core.errors import SettingsError
from .budget import OK
from .scaling import speedups

MARKERS = "osD^v<>Ph*Xd"
# the SODM lines take matplotlib's first default colours; the other methods these
OTHER_COLORS = ("black", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan", "navy",
                "darkred", "darkgreen", "goldenrod", "magenta", "teal", "coral", "indigo")


#: The one line a run that draws gets without matplotlib (pyproject.toml's plots extra)
MISSING_MATPLOTLIB = ('the benchmark\'s PNG plots need matplotlib, which is not installed: '
                      'pip install "sodm-spark[plots]" (or "sodm-spark[bench]")')


def require_matplotlib() -> None:
    """Refuse a run that will draw when matplotlib is missing: a SettingsError naming the extra
    to install (the benchmark job checks this before its methods run, not after)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise SettingsError(MISSING_MATPLOTLIB)


def _pyplot():
    require_matplotlib()
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
    """Figure 1 style, accuracy (y) against fit seconds (x, log), in two panels: every SODM
    level per partitioner (top), and every method side by side with the Pareto front
    (bottom; SODM's first partitioner with all its levels)."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 10))
    finished = [r for r in rows if r["status"] == OK and r["accuracy"] is not None]
    sodm: dict[str, list[dict]] = {}
    for row in finished:
        if row["method"] == "sodm":
            sodm.setdefault(row["name"], []).append(row)
    shown = []  # the bottom panel's points
    for number, (name, levels) in enumerate(sodm.items()):
        levels = sorted(levels, key=lambda r: r["fit_seconds"])
        line, = top.plot([r["fit_seconds"] for r in levels], [r["accuracy"] for r in levels],
                         "-" + MARKERS[number % len(MARKERS)], linewidth=2, label=f"{name} "
                         f"(levels {levels[0]['level']}→{levels[-1]['level']}, left to right)")
        if number == 0:  # the lines run the same way: one labelled line is enough
            for r in levels:
                top.annotate(f"level {r['level']}", (r["fit_seconds"], r["accuracy"]),
                             fontsize=8, xytext=(4, -13), textcoords="offset points",
                             color=line.get_color(), ha="left")
            # the headline partitioner: every level beside the other methods
            shown += levels
            bottom.plot([r["fit_seconds"] for r in levels], [r["accuracy"] for r in levels],
                        "-" + MARKERS[0], color=line.get_color(), markersize=9,
                        label=f"{name}, levels {levels[0]['level']}→{levels[-1]['level']} "
                        "(Spark)")
        else:
            final = levels[-1]
            shown.append(final)
            bottom.plot(final["fit_seconds"], final["accuracy"], MARKERS[number % len(MARKERS)],
                        color=line.get_color(), markersize=9,
                        label=f"{name} level {final['level']} (Spark)")
    others = [r for r in finished if r["method"] != "sodm"]
    for index, row in enumerate(others, start=len(sodm)):
        bottom.plot(row["fit_seconds"], row["accuracy"], MARKERS[index % len(MARKERS)],
                    color=OTHER_COLORS[(index - len(sodm)) % len(OTHER_COLORS)], markersize=9,
                    label=f"{row['name']} ({row['runs_on']})")
    front = pareto_front(shown + others)
    if len(front) > 1:
        bottom.step([r["fit_seconds"] for r in front], [r["accuracy"] for r in front],
                    where="post", linestyle="--", color="0.5", linewidth=1, zorder=0,
                    label="Pareto front (none faster and more accurate)")
    top.set_title(title + "\nSODM: one point per level (seconds cumulative to that level)")
    bottom.set_title("Every method (SODM: every level of the first partitioner, the others' "
                     "final level)")
    for ax in (top, bottom):
        ax.set_xlabel("fit seconds (log scale)")
        _plain_log_axis(ax.xaxis)
        ax.set_ylabel("test accuracy")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _not_finished_note(bottom, rows)
    fig.tight_layout()
    _save(fig, path)


def pareto_front(rows: list[dict]) -> list[dict]:
    """The rows no other row beats on both fit seconds (fewer) and accuracy (higher), fastest
    first: the best accuracy on offer for each time spent."""
    front: list[dict] = []
    for row in sorted(rows, key=lambda r: (r["fit_seconds"], -r["accuracy"])):
        if not front or row["accuracy"] > front[-1]["accuracy"]:
            front.append(row)
    return front


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
    left.set_ylim(bottom=0)
    left.set_title("SODM seconds")
    left.legend(fontsize=8)
    right.set_title("SODM speed-up")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def plot_seconds_vs_rows(rows: list[dict], path, title: str, budget=None) -> None:
    """Seconds against M (log-log): SODM per level depth and overall, and the other methods;
    a method that did not finish is drawn as an x on the budget line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 5.5))
    series: dict[tuple[int, int, str], list[tuple]] = {}
    for row in rows:
        if row["method"] == "sodm" and row.get("depth") is not None and row["status"] == OK:
            key = (0, row["depth"], f"SODM level top−{row['depth']}" if row["depth"]
                   else "SODM top level")
            series.setdefault(key, []).append((row["rows"], row["level_seconds"],
                                               row.get("rows_per_partition")))
            if row.get("final"):
                series.setdefault((1, 0, "SODM whole fit (partitioning included)"), []).append(
                    (row["rows"], row["fit_seconds"], None))
        elif row["method"] != "sodm" and not row.get("note", "").startswith("not run"):
            value = row["fit_seconds"] if row["status"] == OK else None
            series.setdefault((2, 0, row["name"]), []).append((row["rows"], value, None))
    crossed = 0  # series drawn as not finished so far: their x's are nudged apart
    for index, ((group, _, name), points) in enumerate(sorted(series.items())):
        points.sort()
        done = [(m, s) for m, s, _ in points if s is not None]
        sizes = sorted({p for _, _, p in points if p})
        spread = f"{min(sizes):,}" if sizes and min(sizes) == max(sizes) else \
            f"{min(sizes):,}–{max(sizes):,}" if sizes else ""
        label = name + (f" (~{spread} rows/partition)" if sizes else "")
        marker = MARKERS[index % len(MARKERS)]
        line = None
        if done:
            line, = ax.plot(*zip(*done), marker=marker, label=label,
                            linestyle="-" if group < 2 else "--")
        failed = [m for m, s, _ in points if s is None]
        if failed and budget:
            ax.plot([m * (1.0 + 0.06 * crossed) for m in failed], [budget] * len(failed), "x",
                    markersize=11, mew=2, color=None if line is None else line.get_color(),
                    label=f"{name}: not finished within {budget:g} s (N/A)")
            crossed += 1
    if budget:
        ax.axhline(budget, color="0.5", linestyle=":", linewidth=1)
        ax.text(0.01, budget, f"budget {budget:g} s", va="bottom", ha="left", fontsize=8,
                color="0.4", transform=ax.get_yaxis_transform())
    ax.set_xscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_xlabel("training rows M (log scale)")
    ax.set_ylabel("seconds (log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    _save(fig, path)


def _plain_log_axis(axis) -> None:
    """A log axis labelled 1, 2, 5, 10, 20, ... rather than 2×10^1."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.axes.set_xscale("log") if axis.axis_name == "x" else axis.axes.set_yscale("log")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _save(fig, path) -> None:
    import matplotlib.pyplot as plt

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

