"""Where the test suite's time goes: every test run once, serially, with the CPU seconds the
whole machine spent on it (the JVMs, Spark's Python workers, the jobs and servers it started)
and its wall seconds, summed by module. A benchmark, not a test: run it on an idle machine.

    python benchmarks/suite_cpu.py                          # the whole suite
    python benchmarks/suite_cpu.py --pytest-args 'tests/test_ml.py tests/test_weights.py'

On 2 cores the suite's two pytest-xdist workers (pyproject.toml) keep both cores busy, so its
time is its CPU time over the cores: the modules and tests at the top of this table are where a
shorter suite has to come from. The record (``--record``, default
``docs/results/suite/cpu-serial-<UTC date>.json``) holds every test's figures, the modules' sums and
the run's totals; the console prints the modules and the 30 costliest tests.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from job_runs import ROOT  # noqa: E402

from sodm_spark.benchmarking.records import (add_record_flag, default_record_path,  # noqa: E402
                                             start_record)

PLUGIN = "suite_cpu_plugin"  # benchmarks/suite_cpu_plugin.py


def by_module(tests: list[dict]) -> list[dict]:
    """The tests' CPU and wall seconds summed by module, the costliest first."""
    sums: dict = defaultdict(lambda: {"cpu_seconds": 0.0, "wall_seconds": 0.0, "tests": 0})
    for test in tests:
        entry = sums[test["test"].split("::")[0]]
        entry["cpu_seconds"] += test["cpu_seconds"]
        entry["wall_seconds"] += test["wall_seconds"]
        entry["tests"] += 1
    return sorted(({"module": name, **entry} for name, entry in sums.items()),
                  key=lambda entry: -entry["cpu_seconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pytest-args", default="",
                        help="what pytest runs (paths, -k, -m), as one string (default: the "
                        "whole suite)")
    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.record is None:  # the tests run one at a time: "serial"
        args.record = default_record_path(ROOT, "cpu", ["serial"], kind="suite")
    record = start_record(parser, args, __file__, argv)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "tests.json"
        command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", PLUGIN,
                   "-p", "no:cacheprovider", *shlex.split(args.pytest_args)]
        env = {**os.environ, "SUITE_CPU_OUT": str(out),
               "PYTHONPATH": str(Path(__file__).resolve().parent)}
        result = subprocess.run(command, cwd=ROOT, env=env)
        record.lap("pytest")
        if not out.exists():
            parser.exit(1, f"error: pytest wrote no figures (exit {result.returncode})\n")
        tests = json.loads(out.read_text())
    modules = by_module(tests)
    totals = {"tests": len(tests), "cpu_seconds": sum(t["cpu_seconds"] for t in tests),
              "wall_seconds": sum(t["wall_seconds"] for t in tests),
              "pytest_exit": result.returncode}
    record.write(totals=totals, modules=modules, tests=tests)
    print(f"\n{totals['tests']} tests: {totals['cpu_seconds']:.0f} CPU s, "
          f"{totals['wall_seconds']:.0f} wall s (pytest exit {result.returncode})")
    print(f"{'CPU s':>8} {'wall s':>8} {'tests':>6}  module")
    for entry in modules:
        print(f"{entry['cpu_seconds']:8.1f} {entry['wall_seconds']:8.1f} {entry['tests']:6d}  "
              f"{entry['module']}")
    print(f"\n{'CPU s':>8} {'wall s':>8}  test")
    for test in sorted(tests, key=lambda t: -t["cpu_seconds"])[:30]:
        print(f"{test['cpu_seconds']:8.1f} {test['wall_seconds']:8.1f}  {test['test']}")
    if args.record:
        print(f"record: {args.record}")
    return 0 if result.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
