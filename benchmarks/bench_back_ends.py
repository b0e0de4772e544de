"""The training command as a user runs it, whole, from its start to its exit, through a classic
session, through a local Spark Connect server, and as another version of the code, in paired
runs. A benchmark, not a test: one command at a time on the whole machine.

    python benchmarks/bench_back_ends.py                          # built-in 60,000 rows, 3 rounds
    python benchmarks/bench_back_ends.py --data-folder /work/data/fashion-600000 --repeat 3
    python benchmarks/bench_back_ends.py --rows 2000 --repeat 1 --variants classic,before

Variants (``--variants``, comma-separated, in the order of a round):

* ``classic`` — ``spark-submit --master local[2] jobs/train_sodm.py`` of this checkout;
* ``connect`` — the same job of this checkout through a local Spark Connect server of its own:
  ``python -m sodm_spark.jobs.train_sodm --master "connect:local[2]"``. spark-submit cannot
  start it: it always sets a master, and pyspark refuses a Connect server beside a master
  (``CANNOT_CONFIGURE_SPARK_CONNECT_MASTER``; ``spark-submit --remote local[2]`` fails as well),
  so the two are started differently, as a user must (the record's settings say so);
* ``before`` — the classic command of another version, ``--before REF`` (``a833d94``, the code
  before the back-end work), from a detached git worktree of REF in a temporary folder, removed
  at the end, also on a failure or Ctrl-C.

Every command runs with ``SPARK_CONF_DIR`` at its version's ``conf/``, this interpreter for the
Python workers and its version first on ``PYTHONPATH`` (and as the working folder), so that the
driver and the workers import that version's ``sodm_spark`` (an editable install points at
another checkout); a probe through spark-submit checks it for each version before the timing
(``import_probe.py``: the file the driver and a worker import), and the record keeps what it
found. Each variant first runs once untimed on 2,000 built-in rows (``--warm-up-rows``) with the
``--job-args`` flags: a fresh worktree compiles its numba kernels into its own cache on its first
run, which the timed runs must not pay (a global step's, 22 s, only where one runs).

Data: the job's built-in rows (its every default: 60,000 generated rows, ``--rows N`` passes the
job's own ``--rows``), or ``--data-folder F`` with ``train/`` and ``test/`` Parquet folders
(``--data F/train --test-data F/test --format parquet``, as ``bench_at_scale.py`` passes them).
Every other setting is the job's default. ``--repeat N`` rounds, each variant once a round in
turn (A B C A B C …): the ratios ``connect/classic`` and ``classic/before`` are taken within a
round, and their medians reported. Each run's whole wall seconds, the job's own train seconds
and test accuracy (its ``--metrics-out``), the seconds of each stage of the job's own timeline
(where the version writes one), the sha256 of the model files it wrote
(``--model-out``, a temporary folder) and its exit code go into the record, rewritten after
every run (``--record``, default ``docs/results/back_ends/<data>-<rows>-<UTC date>.json``;
sodm_spark.benchmarking.records), with the summary (sodm_spark.benchmarking.back_ends_report).
A failed run ends the script with one line (its variant, round and last lines of stderr) and
exit code 1; the record keeps the runs done before it.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from job_runs import ROOT, job_env, timed_run  # noqa: E402

sys.path.insert(0, str(ROOT))
from sodm_spark.benchmarking.back_ends_report import RECORDS, VARIANTS, summarize  # noqa: E402
from sodm_spark.benchmarking.records import (add_record_flag, default_record_path,  # noqa: E402
                                             parquet_identity, start_record)
from sodm_spark.core.errors import EXIT_CODES, SETTINGS  # noqa: E402

BEFORE = "a833d94"
MASTER = "local[2]"
JOB = "train_sodm.py"
#: What a failed run's line quotes of its stderr
STDERR_LINES = 3
#: Why the Connect variant is not started by spark-submit (the record's settings say it)
CONNECT_LAUNCH = ("spark-submit cannot start a job on a Spark Connect server of its own: it "
                  "always sets a master, and pyspark refuses a Connect server beside one "
                  "(CANNOT_CONFIGURE_SPARK_CONNECT_MASTER; spark-submit --remote local[2] fails "
                  "too), so it runs as python -m, the job's module, with the same environment")


class RunFailed(Exception):
    """What ends the benchmark before its end: a run that did not exit 0, a version that does
    not import its own code, a --before git cannot check out; its one line says which and why,
    ``exit_code`` the script's (a setting's for --before)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def variant_command(variant: str, root: Path, job_args: list[str],
                    python: str = sys.executable) -> list[str]:
    """The command line of ``variant`` for the checkout at ``root`` (module docstring)."""
    if variant == "connect":
        return [python, "-m", "sodm_spark.jobs.train_sodm", "--master",
                f"connect:{MASTER}", *job_args]
    return ["spark-submit", "--master", MASTER, str(root / "jobs" / JOB), *job_args]


def launch_line(command: list[str], root: Path) -> str:
    """``command`` as a shell runs it, with the working folder and the environment it had."""
    env = job_env(root)
    return (f"cd {shlex.quote(str(root))} && SPARK_CONF_DIR={shlex.quote(env['SPARK_CONF_DIR'])} "
            f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])} "
            f"PYSPARK_PYTHON={shlex.quote(env['PYSPARK_PYTHON'])} {shlex.join(command)}")


def model_digest(folder: Path) -> dict:
    """The sha256 of each file under ``folder`` (by its path there), and one sha256 of them all
    (the paths and their files' hashes, in path order): the same model files, the same hash."""
    files = {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
             for path in sorted(folder.rglob("*")) if path.is_file()}
    whole = hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in files.items())
                           .encode()).hexdigest()
    return {"sha256": whole, "files": files}


def last_lines(text: str, count: int = STDERR_LINES) -> str:
    """The last ``count`` lines of ``text`` that are not blank, on one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:]) or "(no output on stderr)"


def run_once(variant: str, number: int, root: Path, job_args: list[str], scratch: Path,
             timeout: float | None) -> dict:
    """One run of ``variant`` (``number``: its round, or -1 for the warm-up): the command, its
    whole wall seconds and exit code, and when it exited 0 the job's train seconds, test
    accuracy and the digest of the model it wrote; else the last lines of its stderr."""
    folder = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=scratch))
    metrics, model = folder / "metrics.json", folder / "model"
    command = variant_command(variant, root, [*job_args, "--model-out", str(model),
                                              "--metrics-out", str(metrics)])
    run = {"variant": variant, "round": number, "command": launch_line(command, root)}
    try:
        result, wall = timed_run(command, job_env(root), cwd=root, timeout=timeout)
    except subprocess.TimeoutExpired:
        run.update(exit_code=None, stderr=f"ran past --run-timeout {timeout:g} s and was killed")
        return run
    run.update(wall_seconds=wall, exit_code=result.returncode)
    if result.returncode == 0:
        figures = json.loads(metrics.read_text())
        run.update(train_seconds=figures.get("train_seconds"),
                   test_accuracy=figures.get("test_accuracy"), model=model_digest(model),
                   stages=stage_seconds(figures))
    else:
        run["stderr"] = last_lines(result.stderr)
    return run


def stage_seconds(figures: dict) -> dict | None:
    """The seconds of each stage of the command's own timeline (its metrics' ``timeline``,
    sodm_spark.core.timeline), None where the version run writes none."""
    timeline = figures.get("timeline")
    if not isinstance(timeline, dict) or not timeline.get("stages"):
        return None
    return {stage["stage"]: stage["seconds"] for stage in timeline["stages"]}


def imported_sodm_spark(root: Path, timeout: float | None) -> dict:
    """The sodm_spark files the driver and the Python workers of a classic command of ``root``
    import (``import_probe.py`` through spark-submit, as the job starts); a RunFailed when they
    are not ``root``'s."""
    probe = Path(__file__).with_name("import_probe.py")
    result, _ = timed_run(["spark-submit", "--master", MASTER, str(probe)], job_env(root),
                          cwd=root, timeout=timeout)
    if result.returncode != 0:
        raise RunFailed(f"the import probe of {root} failed (exit code {result.returncode}): "
                        f"{last_lines(result.stderr)}")
    found = json.loads(result.stdout.strip().splitlines()[-1])
    foreign = [path for path in [found["driver"], *found["workers"]]
               if not Path(path).resolve().is_relative_to(root.resolve())]
    if foreign or not found["workers"]:
        raise RunFailed(f"a command of {root} imports sodm_spark from {foreign or 'no worker'}, "
                        "not from that checkout: check PYTHONPATH and the installed package")
    return found


@contextlib.contextmanager
def worktree(ref: str, repository: Path = ROOT):
    """A detached git worktree of ``ref`` in a temporary folder for the block; removed (and git's
    list of worktrees pruned) on the way out, whatever ends the block: a failed run, Ctrl-C."""
    folder = Path(tempfile.mkdtemp(prefix="sodm-before-"))
    path = folder / "checkout"
    try:
        added = subprocess.run(["git", "-C", str(repository), "worktree", "add", "--detach",
                                str(path), ref], capture_output=True, text=True)
        if added.returncode != 0:
            raise RunFailed(f"--before {ref}: git cannot check it out "
                            f"({last_lines(added.stderr, 1)}); give a commit of this repository",
                            EXIT_CODES[SETTINGS])
        yield path
    finally:
        subprocess.run(["git", "-C", str(repository), "worktree", "remove", "--force", str(path)],
                       capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["git", "-C", str(repository), "worktree", "prune"], capture_output=True)


def data_arguments(args) -> tuple[dict, list[str]]:
    """(the record's ``data``: name, rows and for a folder the identity of its Parquet rows,
    and ``job_args`` where ``--job-args`` gives the job more flags; the job's flags) of
    ``args``."""
    extra = shlex.split(args.job_args or "")
    if args.data_folder is None:
        from sodm_spark.jobs.train_args import DEFAULT_ROWS

        rows = args.rows or DEFAULT_ROWS
        data: dict = {"name": "built-in", "rows": rows}
        flags = [] if args.rows is None else ["--rows", str(args.rows)]
    else:
        folder = args.data_folder.resolve()
        train, test = parquet_identity(folder / "train"), parquet_identity(folder / "test")
        data = {"name": folder.name.removesuffix(f"-{train['rows']}"), "rows": train["rows"],
                "folder": str(folder), "train": train, "test": test}
        flags = ["--data", str(folder / "train"), "--test-data", str(folder / "test"),
                 "--format", "parquet"]
    if extra:
        data["job_args"] = shlex.join(extra)
    return data, flags + extra


def record_name(data: dict) -> str:
    """The data's part of the record's file name: its name, and its extra job flags."""
    extra = "".join(c if c.isalnum() else "-" for c in data.get("job_args", "")).strip("-")
    return data["name"] + (f"-{extra}" if extra else "")


def print_table(summary: dict) -> None:
    print(f"\n{'variant':<9}{'runs':>5}{'whole s':>9}{'train s':>9}{'test acc':>10}  model sha256")
    for variant, medians in summary["medians"].items():
        digests = ", ".join(d[:12] for d in summary["model_sha256"].get(variant, []))
        print(f"{variant:<9}{medians['runs']:>5}{medians.get('wall_seconds', 0):>9.1f}"
              f"{medians.get('train_seconds', 0):>9.1f}{medians.get('test_accuracy', 0):>10.4f}"
              f"  {digests}")
    for name, ratio in summary["ratios"].items():
        rounds = ", ".join(f"{pair['ratio']:.2f}" for pair in ratio["rounds"])
        print(f"{name}: {ratio['median']:.2f}× (median of the rounds: {rounds})")
    identical = summary["models_identical"]
    print("model files: " + {True: "identical bytes in every run", False: "not identical",
                             None: "none written"}[identical])
    stages = summary.get("stage_medians") or {}
    if stages:
        variants = list(stages)
        print(f"\n{'stage (median s)':<20}" + "".join(f"{v:>9}" for v in variants))
        for name in dict.fromkeys(n for v in variants for n in stages[v]):
            print(f"{name:<20}" + "".join(
                f"{stages[v][name]:>9.1f}" if name in stages[v] else f"{'-':>9}"
                for v in variants))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--rows", type=int, help="built-in data: the job's --rows (its default: "
                      "60,000 generated rows)")
    data.add_argument("--data-folder", type=Path, help="a folder of train/ and test/ Parquet "
                      "folders (bench_at_scale.py's), instead of the built-in data")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, in a round's order (default: {','.join(VARIANTS)})")
    parser.add_argument("--before", default=BEFORE,
                        help="the version the before variant runs (default: %(default)s)")
    parser.add_argument("--job-args", default="",
                        help="more flags of the training job for every timed run (e.g. "
                        "'--levels 2'), recorded with the data")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default: %(default)s)")
    parser.add_argument("--warm-up-rows", type=int, default=2000,
                        help="built-in rows of each variant's untimed first run; 0: none")
    parser.add_argument("--run-timeout", type=float, default=7200.0, metavar="SECONDS",
                        help="a run still going after this fails (default: %(default)s)")
    add_record_flag(parser)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    variants = [variant for variant in args.variants.split(",") if variant]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if not variants or len(set(variants)) != len(variants):
        parser.error("--variants names each variant once")
    if args.repeat < 1:
        parser.error("--repeat must be 1 or more")
    data, job_args = data_arguments(args)
    args.record = args.record or default_record_path(ROOT, record_name(data), [data["rows"]],
                                                     kind=Path(RECORDS).name)
    for variant in variants:  # the settings say how each variant is started (before: from
        # its worktree), and why Connect is started otherwise
        setattr(args, f"launch_{variant}",
                shlex.join(variant_command(variant, Path("."), [], python="python")))
    if "connect" in variants:
        args.launch_connect_why = CONNECT_LAUNCH
    record = start_record(parser, args, __file__, argv)
    runs: list[dict] = []
    found: dict = {"data": data, "variants": variants, "runs": runs, "warm_up": [],
                   "imports": {}}
    try:
        with contextlib.ExitStack() as stack:
            roots = {variant: stack.enter_context(worktree(args.before))
                     if variant == "before" else ROOT for variant in variants}
            for variant in ("before", "classic"):
                if variant in roots:
                    found["imports"][variant] = imported_sodm_spark(roots[variant],
                                                                    args.run_timeout)
            record.lap("imports")
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            if args.warm_up_rows:
                for variant in variants:
                    run = run_once(variant, -1, roots[variant],
                                   ["--rows", str(args.warm_up_rows),
                                    *shlex.split(args.job_args or "")],
                                   scratch, args.run_timeout)
                    found["warm_up"].append(run)
                    check(run)
                record.lap("warm-up")
            for number in range(args.repeat):
                for variant in variants:
                    run = run_once(variant, number, roots[variant], job_args, scratch,
                                   args.run_timeout)
                    runs.append(run)
                    record.lap(f"{variant} {number + 1}")
                    record.write(finished=False, **found, summary=summarize(runs))
                    print(f"round {number + 1}/{args.repeat} {variant:<8} "
                          f"{run.get('wall_seconds', float('nan')):8.1f} s  exit "
                          f"{run['exit_code']}", flush=True)
                    check(run)
    except RunFailed as failure:
        record.write(finished=False, **found, summary=summarize(runs), failure=str(failure))
        print(f"bench_back_ends: {failure}; record: {args.record}", flush=True)
        return failure.exit_code
    except KeyboardInterrupt:
        record.write(finished=False, **found, summary=summarize(runs), failure="interrupted")
        print(f"bench_back_ends: interrupted; record: {args.record}", flush=True)
        return 130
    summary = summarize(runs)
    record.write(**found, summary=summary)
    print_table(summary)
    print(f"record: {args.record}", flush=True)
    return 0


def check(run: dict) -> None:
    """A RunFailed naming ``run``'s variant and round when it did not exit 0."""
    if run["exit_code"] != 0:
        where = "the warm-up" if run["round"] < 0 else f"round {run['round'] + 1}"
        raise RunFailed(f"the {run['variant']} run of {where} failed (exit code "
                        f"{run['exit_code']}): {run['stderr']}")


if __name__ == "__main__":
    sys.exit(main())
