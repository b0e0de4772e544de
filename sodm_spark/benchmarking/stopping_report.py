"""The stop rule judged on stored every-level runs (``benchmarks/bench_stopping.py``'s records,
docs/results/stopping.json), and the figures docs/benchmarks.md and the README quote of them.

:func:`judge` replays the rule on one run; :func:`stopping_values` renders the tables and the
figures of the prose around them (``benchmarks/render_results.py`` fills the templates of
docs/results/prose/ with them), so none is typed by hand.
"""
from __future__ import annotations

import copy
import statistics

from ..selection.stopping import StopRule, replay

#: The data sets of the every-level runs, as the tables name them (training rows, a fact of
#: the data set, not a measurement).
LABELS = {"fashion-mnist": "fashion-mnist, binary (60,000)",
          "fashion-mnist-10": "fashion-mnist-10, 10 classes (20,000)",
          "letter": "letter (16,000)", "satellite": "satellite (4,435)",
          "shuttle": "shuttle (43,500)", "nonlinear": "sphere, generated (60,000)"}
#: The README's shorter table: a row per label, of one data set or several with the same
#: kind of outcome.
README_ROWS = (("Fashion-MNIST binary, `--levels 3`", ("fashion-mnist",)),
               ("Fashion-MNIST 10 classes, `--levels 2`; letter", ("fashion-mnist-10", "letter")),
               ("satellite (two levels: the choice between them)", ("satellite",)),
               ("shuttle; generated sphere", ("shuttle", "nonlinear")))
#: Other settings the stored runs are judged under (``bench_stopping.py --replay``).
OTHER_RULES = {"confidence-0": StopRule(confidence=0.0), "confidence-2": StopRule(confidence=2.0),
               "min-improvement-0.001": StopRule(min_improvement=0.001),
               "min-improvement-0.003": StopRule(min_improvement=0.003)}
#: A prediction "within a factor" of the measured seconds.
FACTOR = 1.5


def judge(run: dict, rule: StopRule, cores: int) -> dict:
    """The rule replayed on one run: the levels it solves, its model, and what that costs."""
    levels = run["levels"]
    solved, chosen, reason = replay(levels, run["validation_rows"], rule, cores)
    test = {entry["level"]: entry["test_accuracy"] for entry in levels}
    hindsight = max(test, key=lambda level: (test[level], -level))  # ties: the cheaper level
    fixed = run["tuning_seconds"] + run["partition_seconds"]
    every = fixed + sum(entry["seconds"] for entry in levels)
    spent = fixed + sum(entry["seconds"] for entry in levels[:len(solved)])
    return {"dataset": run["dataset"], "seed": run["seed"], "stopped_after": solved[-1],
            "chosen": chosen, "reason": reason, "best": hindsight,
            "accuracy": test[chosen], "best_accuracy": test[hindsight],
            "lost_points": 100 * (test[hindsight] - test[chosen]),
            "seconds": spent, "every_level_seconds": every}


def totals(judged: list[dict]) -> dict:
    """The largest and the mean accuracy lost, and the rule's share of every level's seconds."""
    lost = [row["lost_points"] for row in judged]
    spent = sum(row["seconds"] for row in judged)
    every = sum(row["every_level_seconds"] for row in judged)
    return {"lost_points_max": max(lost), "lost_points_mean": statistics.mean(lost),
            "seconds": spent, "every_level_seconds": every, "share": spent / every}


def _by_set(rows: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["dataset"], []).append(row)
    return grouped


def _seeds(rows: list[dict], field: str) -> str:
    return ", ".join(str(row[field]) for row in rows)


def table(runs: list[dict], judged: list[dict]) -> str:
    """docs/benchmarks.md's table: a row per data set (its seeds pooled), then every run."""
    lines = ["| data set (training rows) | levels | stop after / model (seeds 0, 1, 2) | best in "
             "hindsight | lost max | lost mean | s rule | s every | share |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    levels = {run["dataset"]: run["levels"] for run in runs}
    for name, rows in _by_set(judged).items():
        part = totals(rows)
        lines.append(f"| {LABELS.get(name, name)} | {levels[name][0]['level']} → "
                     f"{levels[name][-1]['level']} | {_seeds(rows, 'chosen')} | "
                     f"{_seeds(rows, 'best')} | {part['lost_points_max']:.2f} | "
                     f"{part['lost_points_mean']:.3f} | {part['seconds']:.1f} | "
                     f"{part['every_level_seconds']:.1f} | {part['share']:.2f} |")
    whole = totals(judged)
    lines.append(f"| all {len(judged)} runs | | | | {whole['lost_points_max']:.2f} | "
                 f"{whole['lost_points_mean']:.3f} | {whole['seconds']:.1f} | "
                 f"{whole['every_level_seconds']:.1f} | {whole['share']:.2f} |")
    return "\n".join(lines)


def _joined(cells: list[str]) -> str:
    """One cell for several data sets: the common value once, else each in turn."""
    return cells[0] if len(set(cells)) == 1 else "; ".join(cells)


def readme_table(judged: list[dict]) -> str:
    """The README's shorter table: model and best level per seed, the lost points (largest /
    mean) and the share of every level's time, a row per :data:`README_ROWS` entry."""
    lines = ["| data set | model / best level (seeds 0, 1, 2) | lost max / mean (points) | share "
             "of every level's time |", "| --- | --- | --- | --- |"]
    grouped = _by_set(judged)
    for label, names in README_ROWS:
        parts = [(grouped[name], totals(grouped[name])) for name in names if name in grouped]
        if not parts:
            continue
        lines.append(f"| {label} | "
                     + _joined([f"{_seeds(rows, 'chosen')} / {_seeds(rows, 'best')}"
                                for rows, _ in parts]) + " | "
                     + _joined([f"{part['lost_points_max']:.2f} / {part['lost_points_mean']:.3f}"
                                for _, part in parts]) + " | "
                     + _joined([f"{part['share']:.2f}" for _, part in parts]) + " |")
    whole = totals(judged)
    lines.append(f"| all {len(judged)} runs | | {whole['lost_points_max']:.2f} / "
                 f"{whole['lost_points_mean']:.3f} | {whole['share']:.2f} |")
    return "\n".join(lines)


def _span(values: list[float], digits: int, unit: str = "") -> str:
    """``low-high`` (or the one value) with ``digits`` decimals, then ``unit``."""
    low, high = f"{min(values):,.{digits}f}", f"{max(values):,.{digits}f}"
    return (low if low == high else f"{low}-{high}") + unit


def _without_command_seconds(runs: list[dict]) -> list[dict]:
    """The runs as a rule that weighs the fit's seconds alone would see them."""
    stripped = copy.deepcopy(runs)
    for run in stripped:
        for entry in run["levels"]:
            entry.pop("before_fit_seconds", None)
    return stripped


def stopping_values(document: dict, cores: int = 2) -> dict[str, str]:
    """Every figure the stopping section and the README quote of ``document`` (a
    stopping.json: its ``runs`` and the default rule's stored ``judged``)."""
    runs, judged = document["runs"], document["judged"]
    grouped_runs = _by_set(runs)
    whole = totals(judged)
    values = {"table": table(runs, judged), "readme-table": readme_table(judged),
              "runs": str(len(runs)),
              "commands-minutes": f"{sum(run['wall_seconds'] for run in runs) / 60:.0f}",
              "lost-mean": f"{whole['lost_points_mean']:.3f}", "share": f"{whole['share']:.2f}"}
    values.update(_fashion_values(grouped_runs["fashion-mnist"],
                                  _by_set(judged)["fashion-mnist"]))
    # what the last level still gains on the test rows where the rule runs every level
    values["level0-gain"] = _span(
        [100 * (run["levels"][-1]["test_accuracy"] - run["levels"][-2]["test_accuracy"])
         for name in ("fashion-mnist-10", "letter") for run in grouped_runs[name]], 2, " points")
    before = [run["levels"][0]["before_fit_seconds"] for run in runs]
    values["before-fit"] = _span(before, 0, " s")
    values["start-up"] = _span([run["stages"]["start-up"] for run in runs], 0, " s")
    values["reading"] = _span([run["stages"]["reading"] for run in runs], 0, " s")
    fit_alone = totals([judge(run, StopRule(), cores)
                        for run in _without_command_seconds(runs)])
    values["fit-alone-lost-mean"] = f"{fit_alone['lost_points_mean']:.3f}"
    values["fit-alone-share"] = f"{fit_alone['share']:.2f}"
    for name, rule in OTHER_RULES.items():
        other = totals([judge(run, rule, cores) for run in runs])
        values[f"{name}-lost-mean"] = f"{other['lost_points_mean']:.3f}"
        values[f"{name}-share"] = f"{other['share']:.2f}"
    values.update(_prediction_values(runs, grouped_runs))
    values.update(_slice_values(grouped_runs))
    return values


def _fashion_values(runs: list[dict], judged: list[dict]) -> dict[str, str]:
    """Binary Fashion-MNIST per seed: the validation rows each merge gained (3 → 2, 2 → 1),
    and where the rule stopped early, the points lost and the seconds saved."""
    values = {"fashion-validation-rows": _span([run["validation_rows"] for run in runs], 0)}
    for run, row in zip(runs, judged):
        wrong = [len(entry["validation_wrong"]) for entry in run["levels"]]
        seed = run["seed"]
        values[f"fashion-seed{seed}-gains"] = " then ".join(
            str(wrong[index] - wrong[index + 1]) for index in range(2))
        values[f"fashion-seed{seed}-lost"] = f"{row['lost_points']:.2f}"
        values[f"fashion-seed{seed}-saved"] = \
            f"{100 * (1 - row['seconds'] / row['every_level_seconds']):.0f}%"
    return values


def _within(entries: list[dict]) -> int:
    return sum(1 / FACTOR <= entry["seconds"] / entry["predicted_seconds"] <= FACTOR
               for entry in entries)


def _prediction_values(runs: list[dict], grouped: dict[str, list[dict]]) -> dict[str, str]:
    """How far the plan's predicted seconds were from the measured: the first level (from a
    solve's sweeps from scratch) and the later ones (from the level before)."""
    first = [run["levels"][0] for run in runs]
    later = [entry for run in runs for entry in run["levels"][1:]]

    def ratios(name: str, top: bool) -> list[float]:
        return [entry["seconds"] / entry["predicted_seconds"] for run in grouped[name]
                for entry in (run["levels"][:1] if top else run["levels"][1:])]

    return {"first-within": f"{_within(first)} of {len(first)}",
            "later-within": f"{_within(later)} of {len(later)}",
            "shuttle-top-over": _span(ratios("shuttle", True), 1),
            # shuttle's later levels took less than predicted, the ten-class split's more
            "shuttle-later-over": f"{1 / min(ratios('shuttle', False)):.1f}",
            "ten-class-later-under": f"{max(ratios('fashion-mnist-10', False)):.1f}",
            "ten-class-sweeps-top": _span([run["levels"][0]["sweeps_max"]
                                           for run in grouped["fashion-mnist-10"]], 0),
            "ten-class-sweeps-merge": _span([run["levels"][1]["sweeps_max"]
                                             for run in grouped["fashion-mnist-10"]], 0)}


def _slice_values(grouped: dict[str, list[dict]]) -> dict[str, str]:
    """What a validation slice cannot tell: satellite's two levels on the test rows and on the
    slice, and binary Fashion-MNIST's last merge."""
    satellite = grouped["satellite"]
    fashion = grouped["fashion-mnist"]
    return {"satellite-test-gap": _span([100 * (run["levels"][0]["test_accuracy"]
                                                - run["levels"][1]["test_accuracy"])
                                         for run in satellite], 2, " points"),
            "satellite-validation-rows": _span([run["validation_rows"] for run in satellite], 0),
            "satellite-validation-gap": str(max(abs(len(run["levels"][0]["validation_wrong"])
                                                    - len(run["levels"][1]["validation_wrong"]))
                                                for run in satellite)),
            "fashion-level0-test-gain": _span([100 * (run["levels"][-1]["test_accuracy"]
                                                      - run["levels"][-2]["test_accuracy"])
                                               for run in fashion], 2, " points"),
            "fashion-level0-validation-gain": _span(
                [len(run["levels"][-2]["validation_wrong"])
                 - len(run["levels"][-1]["validation_wrong"]) for run in fashion], 0)}
