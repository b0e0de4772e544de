"""The report of a hyperparameter search (``--tune-report``): a text table, JSON and a heat map PNG
of validation accuracy (or of the metric the search ranked by, :mod:`.metrics`), written from
:meth:`sodm_spark.spark.tune.TuneResult.to_dict`."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from .metrics import oriented

#: The table's column of each metric.
COLUMNS = {"accuracy": "val acc", "auc": "val auc", "logloss": "val logloss", "f1": "val f1",
           "balanced_accuracy": "val bal acc", "weighted_accuracy": "val w-acc"}


def ranked_by(report: dict) -> tuple[str, str]:
    """(the metric a report's points were ranked by, its key in each point)."""
    metric = report.get("metric", "accuracy")  # reports before metrics ranked by accuracy
    return metric, f"validation_{metric}"


def point_line(point: dict, index: int, total: int, base_gamma: float) -> str:
    """One progress / table line of a grid point (its metric's value too, when it has one
    besides accuracy)."""
    flag = "" if point["converged"] else "  (not converged: max_iter)"
    other = "".join(f", {key[len('validation_'):]} {value:.4f}" for key, value in point.items()
                    if key.startswith("validation_") and key != "validation_accuracy")
    return (f"  [{index:>3}/{total}] gamma {point['gamma_scale']:g}x = "
            f"{base_gamma * point['gamma_scale']:.4g}  lam {point['lam']:g}  theta "
            f"{point['theta']:g}  v {point['v']:g}  ->  validation accuracy "
            f"{point['validation_accuracy']:.4f}{other}  (sweeps {point['sweeps_max']}){flag}")


def table(report: dict) -> str:
    """Every grid point, best first by the metric ranked by, as aligned text."""
    metric, key = ranked_by(report)
    rows = sorted(report["points"], key=lambda p: -oriented(metric, p[key]))
    extra = "" if metric == "accuracy" else f" {COLUMNS[metric]:>11}"
    lines = [f"{'gamma':>10} {'x scale':>8} {'lam':>8} {'theta':>6} {'v':>5} "
             f"{'val acc':>8}{extra} {'sweeps':>7}"]
    for p in rows:
        value = "" if metric == "accuracy" else f" {p[key]:>11.4f}"
        lines.append(f"{report['base_gamma'] * p['gamma_scale']:>10.4g} {p['gamma_scale']:>8g} "
                     f"{p['lam']:>8g} {p['theta']:>6g} {p['v']:>5g} "
                     f"{p['validation_accuracy']:>8.4f}{value} {p['sweeps_max']:>7}")
    return "\n".join(lines)


def plot_heatmap(report: dict, path) -> None:
    """Validation accuracy (or the metric ranked by) over (γ multiple × λ), one panel per
    (θ, v), one colour scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = report["grid"]
    scales, lams = sorted(grid["gamma"]), sorted(grid["lam"])
    panels = [(theta, v) for theta in grid["theta"] for v in grid["v"]]
    metric, key = ranked_by(report)
    shown = metric.replace("_", " ")
    accuracy = {(p["gamma_scale"], p["lam"], p["theta"], p["v"]): p[key]
                for p in report["points"]}
    values = np.array(list(accuracy.values()))
    columns = min(len(panels), 4)
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns + 1, 2.6 * rows + 0.6),
                             squeeze=False)
    best = report["best"]
    image = None
    for ax, (theta, v) in zip(axes.flat, panels):
        cells = np.array([[accuracy.get((s, lam, theta, v), np.nan) for lam in lams]
                          for s in scales])
        image = ax.imshow(cells, vmin=values.min(), vmax=values.max(), origin="lower",
                          cmap="viridis_r" if metric == "logloss" else "viridis",  # bright best
                          aspect="auto")
        for i in range(len(scales)):
            for j in range(len(lams)):
                is_best = (scales[i], lams[j], theta, v) == (
                    best["gamma_scale"], best["lam"], best["theta"], best["v"])
                ax.text(j, i, f"{cells[i, j]:.3f}", ha="center", va="center", fontsize=7,
                        color="red" if is_best else "white", weight="bold" if is_best else None)
        ax.set_xticks(range(len(lams)), [f"{lam:g}" for lam in lams], fontsize=7)
        ax.set_yticks(range(len(scales)), [f"{s:g}" for s in scales], fontsize=7)
        ax.set_xlabel("λ", fontsize=8)
        ax.set_ylabel("γ / base γ", fontsize=8)
        ax.set_title(f"θ = {theta:g}, v = {v:g}", fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    assert image is not None  # a grid has at least one (θ, v) panel
    fig.colorbar(image, ax=axes.ravel().tolist(), label=f"validation {shown}")
    fig.suptitle(f"ODM validation {shown} on {report['partitions']} top-level partitions "
                 f"({report['validation_rows']} rows; base γ = {report['base_gamma']:.4g})",
                 fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: dict, out_dir) -> dict:
    """tuning.json, tuning.txt and tuning.png in ``out_dir``; returns the paths written. The
    heat map only where matplotlib is installed (the plots extra): the search's choice is in
    the other two."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "tuning.json", "table": out / "tuning.txt", "heatmap": out / "tuning.png"}
    paths["json"].write_text(json.dumps(report, indent=2) + "\n")
    paths["table"].write_text(table(report) + "\n")
    if importlib.util.find_spec("matplotlib") is None:
        del paths["heatmap"]
    else:
        plot_heatmap(report, paths["heatmap"])
    return {k: str(v) for k, v in paths.items()}
