"""Every benchmark script writes its result record through one helper
(sodm_spark.benchmarking.records: ``--record PATH``): each script's parser offers the flag, and
the older names the guides use still reach it; the record holds the command, the commit, the
machine, the data's identity, the figures and a timeline, checked against git, the machine and
hashes of the bytes computed here; it is strict JSON and replaces the file whole. No Spark, no
benchmark run: the scripts are imported for their parsers only."""
import hashlib
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from argparse import ArgumentParser
from pathlib import Path

import numpy as np
import pytest

from sodm_spark.benchmarking import records
from sodm_spark.benchmarking.records import RunRecord, add_record_flag, start_record

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(path.stem for path in BENCHMARKS.glob("bench_*.py"))
#: The names the scripts took for their record before ``--record`` (the guides quote them)
OLDER_NAMES = {"bench_calibration": "--json", "bench_coreset_svm": "--json-out",
               "bench_csvrg": "--json-out", "bench_cvr": "--json-out", "bench_defaults": "--json",
               "bench_gpu": "--json", "bench_headline": "--json-out",
               "bench_level_costs": "--json", "bench_linear_job": "--json-out",
               "bench_predict": "--json-out", "bench_sodm_levels": "--json-out",
               "bench_stopping": "--json", "bench_weights": "--json"}
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTED = re.compile(r"python benchmarks/(bench_\w+)\.py([^`#\n]*)")


def _parser(script: str) -> ArgumentParser:
    if str(BENCHMARKS) not in sys.path:  # the scripts import each other by name
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(script).build_parser()


def _documented_commands():
    for guide in GUIDES:
        for match in DOCUMENTED.finditer(guide.read_text()):
            yield pytest.param(match[1], shlex.split(match[2]),
                               id=f"{guide.name}: {match[1]}{match[2].rstrip()}")


def test_every_benchmark_script_is_found():
    assert len(SCRIPTS) >= 19 and "bench_at_scale" in SCRIPTS and "bench_gpu" in SCRIPTS
    assert set(OLDER_NAMES) <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_script_offers_record(script):
    actions = _parser(script)._option_string_actions
    assert "--record" in actions, f"benchmarks/{script}.py has no --record"
    assert actions["--record"].dest == "record"
    if script in OLDER_NAMES:  # the older name is the same option, not a second output
        assert actions[OLDER_NAMES[script]] is actions["--record"]
        args = _parser(script).parse_args([OLDER_NAMES[script], "out/run.json"])
        assert args.record == Path("out/run.json")


@pytest.mark.parametrize("script, argv", list(_documented_commands()))
def test_every_documented_benchmark_command_parses(script, argv):
    """The commands the guides print are accepted by the scripts' parsers as they stand."""
    _parser(script).parse_args(argv)


def _example_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="bench_example.py")
    parser.add_argument("--rows", type=int, default=10)
    add_record_flag(parser, "--json-out")
    return parser


def _git(*command: str) -> str:
    return subprocess.run(["git", *command], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def _strict(text: str):
    """JSON as the standard has it: NaN and infinities refused."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_a_record_holds_command_commit_machine_data_figures_and_timeline(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(2500, 3)), np.where(rng.random(2500) < 0.5, -1.0, 1.0)
    test_file = tmp_path / "test.libsvm"
    test_file.write_text("1 1:0.5 2:1\n-1 1:0.25\n1 3:2\n")
    path = tmp_path / "records" / "run.json"  # the folder is made
    argv = ["--json-out", str(path), "--rows", "2500"]
    parser = _example_parser()
    script = str(BENCHMARKS / "bench_example.py")
    record = start_record(parser, parser.parse_args(argv), script, argv)

    begun = _strict(path.read_text())  # the head is on disk before any work
    assert begun["finished_utc"] is None and begun["settings"]["rows"] == 2500
    assert begun["command"] == shlex.join([sys.executable, script, *argv])

    record.add_data("example", (X, y), test_file)
    record.lap("method a")
    record.lap("method b")
    record.write(results={"method a": {"accuracy": np.float64(0.75), "support": np.int64(12),
                                       "seconds": float("nan")}})
    written = _strict(path.read_text())

    assert written["git"]["commit"] == _git("rev-parse", "HEAD")
    assert written["git"]["dirty"] == bool(_git("status", "--porcelain"))
    machine = written["machine"]
    assert machine["cores"] == os.cpu_count()
    assert machine["mem_total_kb"] > 0 and isinstance(machine["gpus"], list)
    blas = [entry for entry in machine["blas"] if entry["user_api"] == "blas"]
    assert blas and all(Path(entry["filepath"]).exists() and "architecture" in entry
                        for entry in blas)

    data, = written["dataset"]
    expected = hashlib.sha256(y.astype("<f8").tobytes() + X[:1000].astype("<f4").tobytes()
                              + X[-1000:].astype("<f4").tobytes()).hexdigest()
    assert data["name"] == "example"
    assert data["train"] == {"rows": 2500, "features": 3, "sha256": expected}
    assert data["test"] == {"path": str(test_file), "bytes": test_file.stat().st_size,
                            "rows": 3,
                            "sha256": hashlib.sha256(test_file.read_bytes()).hexdigest()}

    # figures as plain JSON: numpy scalars as numbers, a NaN as null
    assert written["results"] == {"method a": {"accuracy": 0.75, "support": 12, "seconds": None}}
    stages = written["timeline"]["stages"]
    assert [stage["stage"] for stage in stages] == ["method a", "method b"]
    assert stages[0]["start"] + stages[0]["seconds"] == pytest.approx(stages[1]["start"])
    assert written["timeline"]["whole"] >= sum(stage["seconds"] for stage in stages)
    assert written["started_utc"] <= written["finished_utc"]


def test_a_record_replaces_its_file_whole(tmp_path, monkeypatch):
    """Readers see the old record or the new one: the new one is complete beside the file
    before it is renamed over it."""
    path = tmp_path / "run.json"
    record = RunRecord(path, ROOT, ["python", "bench_example.py"], {"rows": 1})
    renamed = []
    real_replace = os.replace

    def replace(source, target):
        staged, current = _strict(Path(source).read_text()), _strict(Path(target).read_text())
        renamed.append((Path(source).parent, staged["finished_utc"], current["finished_utc"]))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    record.write(results={"a": 1})
    assert renamed == [(tmp_path, _strict(path.read_text())["finished_utc"], None)]
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no staging file left


def test_no_record_without_a_path(tmp_path):
    record = RunRecord(None, ROOT, ["python", "bench_example.py"], {})
    record.add_data("never read", tmp_path / "missing.libsvm")  # not read: no record
    assert record.lap("method a") >= 0.0
    record.write(results={"a": 1})
    assert record.document == {} and not any(tmp_path.iterdir())


def test_a_record_path_that_cannot_be_written_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    parser = _example_parser()
    argv = ["--record", str(folder)]
    with pytest.raises(SystemExit) as exit_:
        start_record(parser, parser.parse_args(argv), str(BENCHMARKS / "bench_example.py"),
                     argv)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --record {folder} cannot be written")
    assert list(folder.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["a-folder"]


def test_sparse_rows_hash_their_stored_entries_without_densifying():
    from scipy import sparse

    rng = np.random.default_rng(1)
    dense = np.where(rng.random((2200, 50)) < 0.1, rng.normal(size=(2200, 50)), 0.0)
    rows, y = sparse.csr_matrix(dense), np.ones(2200)
    identity = records.array_identity(rows, y)
    assert (identity["rows"], identity["features"]) == (2200, 50)
    assert identity == records.array_identity(sparse.csr_matrix(dense.copy()), y.copy())
    changed = dense.copy()
    changed[-1, np.flatnonzero(changed[-1])[0]] += 1.0  # one stored value of the last row
    assert records.array_identity(sparse.csr_matrix(changed), y)["sha256"] != identity["sha256"]
    moved = dense.copy()
    moved[0] = np.roll(moved[0], 1)  # the same values in other columns
    assert records.array_identity(sparse.csr_matrix(moved), y)["sha256"] != identity["sha256"]
