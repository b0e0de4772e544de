"""Automatic stopping judged as a decision: every level of SODM on the real data sets here and
several seeds, and what the stop rule would have done on each. A benchmark, not a test.

    python benchmarks/bench_stopping.py [--datasets fashion-mnist,letter,...] [--seeds 0,1,2] \\
        [--record runs.json]
    python benchmarks/bench_stopping.py --replay runs.json [--min-improvement X] \\
        [--stop-confidence Z]

Each (data set, seed) is one run of the job as a command (``spark-submit --master local[2]
jobs/train_sodm.py``, the settings of conf/) with no hyperparameters (the default search),
automatic levels (or :data:`LEVELS`), ``--no-auto-stop --test-every-level`` and ``--seed``: it
solves every level down to level 0 and records each level's seconds, its prediction, the
seconds the command ran before the fit (start-up, reading: the stop rule weighs a level's cost
against the whole command, docs/design.md §2.7), the validation rows it gets wrong (the
held-out slice automatic stopping scores) and its test accuracy. The rule
(:func:`sodm_spark.selection.stopping.replay`: the same StopRule and choose_level a fit with
automatic stopping calls) is then replayed on those records. Per data set: the level the
rule stopped after and the model it returned, the best level in hindsight by test accuracy,
the accuracy lost against it, and the training seconds (search, partitioning and the levels
solved) against those of every level. ``--record PATH`` (or ``--json PATH``) writes the result
record (sodm_spark.benchmarking.records: the runs, rewritten after each, then the judgements
and their totals; each data set's files and a stage a run). ``--replay`` re-judges saved runs
under other rule settings without solving anything again (and writes no record).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))
from bench_defaults import files_for  # noqa: E402
from job_runs import submit  # noqa: E402

from sodm_spark.benchmarking.records import add_record_flag, start_record  # noqa: E402
from sodm_spark.benchmarking.stopping_report import judge, totals  # noqa: E402
from sodm_spark.data.datasets import DatasetUnavailable  # noqa: E402
from sodm_spark.selection.stopping import StopRule  # noqa: E402
from sodm_spark.spark.sodm.params import SODMParams  # noqa: E402

DATASETS = ("fashion-mnist", "fashion-mnist-10", "letter", "satellite", "shuttle", "nonlinear")
# the ten-class split on 20,000 training rows: its level 0 solves ten duals of all rows at once
TRAIN_ROWS = {"fashion-mnist-10": 20_000}
# The job's automatic level count starts rows of 784 features at the deepest level whose
# kernels are cached, which at these sizes is level 0: one exact solve, nothing for the rule to
# decide. These data sets run the levels a user asks for with --levels (the headline command's
# 3; 2 for the ten-class split's 20,000 rows); the others take the automatic count.
LEVELS = {"fashion-mnist": 3, "fashion-mnist-10": 2}
#: What a run keeps of each level's record: what replay and the cost comparison read.
LEVEL_FIELDS = ("level", "partitions", "max_rows", "tasks", "kernel", "storage", "sweeps_max",
                "seconds", "elapsed", "before_fit_seconds", "predicted_seconds",
                "validation_accuracy", "validation_wrong", "test_accuracy")


def run_every_level(name: str, seed: int, work_dir: Path, master: str) -> dict:
    """One run of the job, as a command, that solves every level: what replay reads of its
    metrics, and its timeline's stages before the fit and whole seconds."""
    train, test = files_for(name, work_dir, 0, TRAIN_ROWS.get(name))  # the seed is the fit's
    levels = ["--levels", str(LEVELS[name])] if name in LEVELS else []
    metrics, wall, _ = submit("train_sodm.py", levels + [
        "--data", str(train), "--test-data", str(test), "--no-auto-stop", "--test-every-level",
        "--max-sv", "none", "--seed", str(seed)], master)
    timeline = metrics.get("timeline", {})
    return {"dataset": name, "seed": seed,
            "levels": [{k: e[k] for k in LEVEL_FIELDS if k in e} for e in metrics["levels"]],
            "validation_rows": metrics["validation_rows"],
            "tuning_seconds": metrics.get("tuning_seconds", 0.0),
            "partition_seconds": metrics["partition_seconds"],
            "train_seconds": metrics["train_seconds"],
            "stages": {stage["stage"]: stage["seconds"] for stage in timeline.get("stages", [])
                       if not stage["stage"].startswith("level ")},
            "whole_seconds": timeline.get("whole"), "wall_seconds": wall}


def report(judged: list[dict]) -> dict:
    """The table per data set (seeds pooled) and the totals; returns the totals."""
    print(f"{'data set':<18} {'seeds':>5} {'stop after':>10} {'model':>6} {'best':>5} "
          f"{'lost max':>8} {'lost mean':>9} {'s rule':>7} {'s every':>8} {'share':>6}")
    by_set = {}
    for row in judged:
        by_set.setdefault(row["dataset"], []).append(row)
    for name, rows in by_set.items():
        part = totals(rows)
        print(f"{name:<18} {len(rows):>5} "
              f"{','.join(str(r['stopped_after']) for r in rows):>10} "
              f"{','.join(str(r['chosen']) for r in rows):>6} "
              f"{','.join(str(r['best']) for r in rows):>5} "
              f"{part['lost_points_max']:>8.2f} {part['lost_points_mean']:>9.3f} "
              f"{part['seconds']:>7.1f} {part['every_level_seconds']:>8.1f} "
              f"{part['share']:>6.2f}")
    whole = totals(judged)
    print(f"{'all':<18} {len(judged):>5} {'':>10} {'':>6} {'':>5} "
          f"{whole['lost_points_max']:>8.2f} {whole['lost_points_mean']:>9.3f} "
          f"{whole['seconds']:>7.1f} {whole['every_level_seconds']:>8.1f} "
          f"{whole['share']:>6.2f}")
    return whole


def build_parser() -> argparse.ArgumentParser:
    defaults = SODMParams()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "sodm_spark")
    add_record_flag(parser, "--json")
    parser.add_argument("--replay", help="judge the runs saved in this JSON instead of running")
    parser.add_argument("--min-improvement", type=float, default=defaults.min_improvement)
    parser.add_argument("--stop-confidence", type=float, default=defaults.confidence)
    parser.add_argument("--cores", type=int, default=2, help="cores the replayed runs had")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    rule = StopRule(args.min_improvement, None, args.stop_confidence)
    if args.replay:
        runs = json.loads(Path(args.replay).read_text())["runs"]
        args.record = None  # a replay measures nothing: the record it read stays as it is
    record = start_record(parser, args, __file__, argv)
    if not args.replay:
        runs = []
        for name in args.datasets.split(","):
            for number, seed in enumerate(int(s) for s in args.seeds.split(",")):
                try:
                    runs.append(run_every_level(name, seed, args.work_dir, args.master))
                except DatasetUnavailable as error:
                    print(f"{name}: skipped ({error})", flush=True)
                    break
                if number == 0:  # its files, as the first run wrote them
                    record.add_data(name, *files_for(name, args.work_dir, 0,
                                                     TRAIN_ROWS.get(name)))
                record.lap(f"{name} seed {seed}")
                print(json.dumps(judge(runs[-1], rule, args.cores)), flush=True)
                # after every run: nothing lost if a later one fails
                record.write(finished=False, runs=runs)
    judged = [judge(run, rule, args.cores) for run in runs]
    totals = report(judged)
    record.write(runs=runs, judged=judged, totals=totals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
