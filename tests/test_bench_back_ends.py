"""benchmarks/bench_back_ends.py and its rendering (sodm_spark.benchmarking.back_ends_report):
the parser, the summary of paired runs against medians and ratios computed by hand, the table
rendered into docs/benchmarks.md from records written here, the model digest against hashlib on
the bytes, and the temporary worktree of --before removed whatever ends the run. No Spark, no
job: where the script would start a command, a test runner stands in for it (the script's
bookkeeping is the subject, not the job's figures)."""
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sodm_spark.benchmarking import back_ends_report as report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_back_ends as bench  # noqa: E402
import render_results  # noqa: E402


def run(variant, number, wall, accuracy=0.9349, digest="a" * 64, exit_code=0, train=None):
    return {"variant": variant, "round": number, "command": f"{variant} command",
            "wall_seconds": wall, "exit_code": exit_code, "train_seconds": train or wall / 2,
            "test_accuracy": accuracy, "model": {"sha256": digest, "files": {}}}


#: Three rounds, every variant once a round: whole seconds chosen so that the ratios are known
WALLS = {"before": (40.0, 44.0, 42.0), "classic": (30.0, 33.0, 36.0),
         "connect": (45.0, 39.6, 48.6)}


def three_rounds(changes=None):
    """The rounds of :data:`WALLS`; ``changes``: (variant, round) → what that run does else."""
    changes = changes or {}
    return [run(variant, number, WALLS[variant][number], **changes.get((variant, number), {}))
            for number in range(3) for variant in ("before", "classic", "connect")]


def test_the_parser_defaults_and_refusals(capsys):
    args = bench.build_parser().parse_args([])
    assert (args.variants, args.repeat, args.before) == ("before,classic,connect", 3, "a833d94")
    assert args.rows is None and args.data_folder is None and args.record is None
    args = bench.build_parser().parse_args(["--data-folder", "/data/f", "--record", "r.json",
                                            "--variants", "classic,connect", "--repeat", "5"])
    assert (args.data_folder, args.record, args.repeat) == (Path("/data/f"), Path("r.json"), 5)
    with pytest.raises(SystemExit):  # the built-in rows or a folder, not both
        bench.build_parser().parse_args(["--rows", "2000", "--data-folder", "/data/f"])
    for argv, says in ((["--variants", "classic,gpu"], "unknown variants ['gpu']"),
                       (["--variants", "classic,classic"], "names each variant once"),
                       (["--repeat", "0"], "--repeat must be 1 or more")):
        with pytest.raises(SystemExit) as refused:
            bench.main(argv)
        assert refused.value.code == 2 and says in capsys.readouterr().err


def test_the_commands_of_the_variants():
    root = Path("/checkout")
    assert bench.variant_command("classic", root, ["--rows", "5"]) == [
        "spark-submit", "--master", "local[2]", "/checkout/jobs/train_sodm.py", "--rows", "5"]
    assert bench.variant_command("before", root, []) == bench.variant_command("classic", root, [])
    assert bench.variant_command("connect", root, ["--rows", "5"], python="python") == [
        "python", "-m", "sodm_spark.jobs.train_sodm", "--master", "connect:local[2]", "--rows",
        "5"]
    line = bench.launch_line(["spark-submit", "x y"], root)
    assert line.startswith("cd /checkout && SPARK_CONF_DIR=/checkout/conf PYTHONPATH=/checkout")
    assert line.endswith("spark-submit 'x y'")


def test_the_summary_pairs_the_runs_of_a_round():
    summary = report.summarize(three_rounds())
    medians = summary["medians"]
    assert medians["classic"] == {"runs": 3, "wall_seconds": 33.0, "train_seconds": 16.5,
                                  "test_accuracy": 0.9349}
    assert medians["before"]["wall_seconds"] == 42.0 and medians["connect"]["wall_seconds"] == 45.0
    connect = summary["ratios"]["connect/classic"]
    assert [p["round"] for p in connect["rounds"]] == [0, 1, 2]
    np.testing.assert_allclose([p["ratio"] for p in connect["rounds"]], [1.5, 1.2, 1.35])
    assert connect["median"] == pytest.approx(1.35)
    before = summary["ratios"]["classic/before"]
    np.testing.assert_allclose([p["ratio"] for p in before["rounds"]], [0.75, 0.75, 36 / 42])
    assert before["median"] == pytest.approx(0.75)
    assert summary["models_identical"] is True


def test_a_failed_run_leaves_its_round_out_of_the_pairs_and_a_model_apart_is_seen():
    runs = three_rounds({("connect", 1): {"exit_code": 4}, ("before", 2): {"digest": "b" * 64}})
    summary = report.summarize(runs)
    assert summary["medians"]["connect"]["runs"] == 2
    assert summary["medians"]["connect"]["wall_seconds"] == pytest.approx((45.0 + 48.6) / 2)
    assert [p["round"] for p in summary["ratios"]["connect/classic"]["rounds"]] == [0, 2]
    assert summary["ratios"]["connect/classic"]["median"] == pytest.approx((1.5 + 1.35) / 2)
    assert summary["models_identical"] is False
    assert summary["model_sha256"]["before"] == ["a" * 64, "b" * 64]
    # the third round's before fitted another model: the same work is rounds 0 and 1
    same = summary["ratios"]["classic/before"]["same_model"]
    assert [p["round"] for p in same["rounds"]] == [0, 1] and same["median"] == pytest.approx(0.75)
    assert summary["ratios"]["connect/classic"]["same_model"]["median"] == pytest.approx(
        (1.5 + 1.35) / 2)
    assert report.summarize([run("classic", 0, 1.0, exit_code=1)])["models_identical"] is None


def test_the_stages_of_the_job_s_timeline_are_kept_and_their_medians_summarized():
    timelines = {("classic", 0): {"search": 30.0, "level 0": 19.0},
                 ("classic", 1): {"search": 32.0, "level 0": 18.0},
                 ("classic", 2): {"search": 34.0, "level 0": 20.0},
                 ("connect", 0): {"search": 66.0, "level 0": 19.5},
                 ("connect", 2): {"search": 60.0}}
    runs = three_rounds()
    for entry in runs:
        entry["stages"] = timelines.get((entry["variant"], entry["round"]))
    runs[-1]["exit_code"] = 1  # connect's third run failed: its stages are left out
    stages = report.summarize(runs)["stage_medians"]
    assert stages == {"classic": {"search": 32.0, "level 0": 19.0},
                      "connect": {"search": 66.0, "level 0": 19.5}}  # before: no timeline
    timeline = {"stages": [{"stage": "reading", "start": 0.0, "seconds": 6.0},
                           {"stage": "search", "start": 6.0, "seconds": 31.9}], "whole": 38.0}
    assert bench.stage_seconds({"timeline": timeline}) == {"reading": 6.0, "search": 31.9}
    assert bench.stage_seconds({"train_seconds": 3.0}) is None  # a version without a timeline


def test_the_model_digest_is_the_files_bytes(tmp_path):
    (tmp_path / "v-000001").mkdir()
    (tmp_path / "v-000001" / "arrays.npz").write_bytes(b"\x00\x01array bytes")
    (tmp_path / "v-000001" / "_COMPLETE").write_bytes(b"")
    digest = bench.model_digest(tmp_path)
    files = {"v-000001/_COMPLETE": hashlib.sha256(b"").hexdigest(),
             "v-000001/arrays.npz": hashlib.sha256(b"\x00\x01array bytes").hexdigest()}
    assert digest["files"] == files
    assert digest["sha256"] == hashlib.sha256(
        "".join(f"{name}\0{sha}\n" for name, sha in sorted(files.items())).encode()).hexdigest()
    (tmp_path / "v-000001" / "arrays.npz").write_bytes(b"\x00\x02array bytes")
    assert bench.model_digest(tmp_path)["sha256"] != digest["sha256"]


def test_a_data_folder_is_named_by_its_rows_and_passed_as_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "fashion-6"
    for part, rows in (("train", 6), ("test", 2)):
        (folder / part).mkdir(parents=True)
        pq.write_table(pa.table({"label": np.ones(rows), "features": [[0.5, 1.0]] * rows}),
                       folder / part / "part-00000.parquet")
    args = bench.build_parser().parse_args(["--data-folder", str(folder)])
    data, job_args = bench.data_arguments(args)
    assert (data["name"], data["rows"], data["test"]["rows"]) == ("fashion", 6, 2)
    assert job_args == ["--data", str(folder / "train"), "--test-data", str(folder / "test"),
                        "--format", "parquet"]
    data, job_args = bench.data_arguments(bench.build_parser().parse_args([]))
    assert data == {"name": "built-in", "rows": 60000} and job_args == []
    assert bench.data_arguments(bench.build_parser().parse_args(["--rows", "2000"]))[1] == [
        "--rows", "2000"]
    # more job flags: passed to every timed run, recorded with the data and in its file name
    data, job_args = bench.data_arguments(bench.build_parser().parse_args(
        ["--rows", "3000", "--job-args", "--levels 2"]))
    assert job_args == ["--rows", "3000", "--levels", "2"]
    assert data == {"name": "built-in", "rows": 3000, "job_args": "--levels 2"}
    assert bench.record_name(data) == "built-in-levels-2"
    assert report._data({"data": data}) == "built-in, 3,000 rows (`--levels 2`)"


def record(data, runs, started="2026-12-01T10:00:00+00:00", before="a833d94"):
    return {"command": "python benchmarks/bench_back_ends.py", "started_utc": started,
            "git": {"commit": "0123456789abcdef", "dirty": False},
            "machine": {"cores": 2, "ram_gib": 7.8, "cpu": "a CPU"}, "data": data,
            "settings": {"before": before,
                         "launch_before": "spark-submit --master 'local[2]' jobs/train_sodm.py",
                         "launch_classic": "spark-submit --master 'local[2]' jobs/train_sodm.py",
                         "launch_connect": "python -m sodm_spark.jobs.train_sodm --master "
                                           "'connect:local[2]'"},
            "runs": runs}


@pytest.fixture
def copy_of_the_guides(tmp_path, monkeypatch):
    """The guides and docs/ copied without any back-end record, the render script pointed there."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.rmtree(tmp_path / report.RECORDS, ignore_errors=True)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.setattr(render_results, "ROOT", tmp_path)
    return tmp_path


def test_the_table_is_rendered_from_the_newest_record_of_each_data_set(copy_of_the_guides):
    folder = copy_of_the_guides / report.RECORDS
    folder.mkdir(parents=True)
    built_in = {"name": "built-in", "rows": 60000}
    older = three_rounds({("classic", 0): {"accuracy": 0.5}})
    (folder / "built-in-60000-2026-11-30.json").write_text(json.dumps(
        record(built_in, older, started="2026-11-30T10:00:00+00:00")))
    (folder / "built-in-60000-2026-12-01.json").write_text(json.dumps(
        record(built_in, three_rounds())))
    apart = three_rounds({("connect", n): {"digest": "b" * 64, "accuracy": 0.9782}
                          for n in range(3)})
    (folder / "fashion-600000-2026-12-01.json").write_text(json.dumps(
        record({"name": "fashion", "rows": 600000}, apart)))

    region = render_results.regions()["back-ends"]
    assert region.records == (f"{report.RECORDS}/built-in-60000-2026-12-01.json",
                              f"{report.RECORDS}/fashion-600000-2026-12-01.json")
    assert render_results.main(["--check"]) == 1  # the copy's region still says "no record"
    assert render_results.main([]) == 0  # writes the regions
    assert render_results.main(["--check"]) == 0
    text = render_results.region_text(copy_of_the_guides / "docs/benchmarks.md", "back-ends")
    assert ("| built-in, 60,000 rows | 3 | 33.0 (30.0-36.0) | 45.0 (39.6-48.6) | "
            "1.35 (1.20-1.50)× | 42.0 (40.0-44.0) | 0.75 (0.75-0.86)× | 0.9349 | "
            "identical bytes |") in text
    assert ("| fashion, 600,000 rows | 3 | 33.0 (30.0-36.0) | 45.0 (39.6-48.6) | "
            "1.35 (1.20-1.50)×; no round of the same model | 42.0 (40.0-44.0) | "
            "0.75 (0.75-0.86)× | before 0.9349, "
            "classic 0.9349, Connect 0.9782 | differ: before = classic ≠ Connect |") in text
    assert f"Rendered from `{report.RECORDS}/built-in-60000-2026-12-01.json`" in text
    assert ("before `spark-submit --master 'local[2]' jobs/train_sodm.py` of a worktree of "
            "a833d94") in text
    assert "Connect `python -m sodm_spark.jobs.train_sodm --master 'connect:local[2]'`" in text
    # a figure of the region edited by hand is caught
    guide = copy_of_the_guides / "docs/benchmarks.md"
    guide.write_text(guide.read_text().replace("| 33.0 (30.0-36.0) |", "| 31.0 (30.0-36.0) |", 1))
    assert render_results.main(["--check"]) == 1


def test_without_a_record_the_region_says_how_to_make_one(tmp_path):
    text = report.back_ends_region(tmp_path)
    assert text.startswith("No record yet: `python benchmarks/bench_back_ends.py`")
    assert report.newest_records(tmp_path) == []


def _worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list", "--porcelain"],
                          capture_output=True, text=True, check=True).stdout


def _argv(tmp_path, *more):
    return ["--before", "HEAD", "--rows", "50", "--warm-up-rows", "0",
            "--record", str(tmp_path / "record.json"), *more]


@pytest.mark.parametrize("interruption", [RuntimeError("the runner broke"), KeyboardInterrupt()])
def test_the_worktree_of_before_is_removed_when_the_run_breaks(tmp_path, monkeypatch,
                                                               interruption):
    roots = []

    def breaking_runner(command, env, cwd=None, timeout=None):
        roots.append(Path(cwd))
        assert (Path(cwd) / "jobs" / "train_sodm.py").is_file()  # the worktree was there
        raise interruption

    monkeypatch.setattr(bench, "timed_run", breaking_runner)
    if isinstance(interruption, KeyboardInterrupt):
        assert bench.main(_argv(tmp_path, "--variants", "before")) == 130
        assert json.loads((tmp_path / "record.json").read_text())["failure"] == "interrupted"
    else:
        with pytest.raises(RuntimeError, match="the runner broke"):
            bench.main(_argv(tmp_path, "--variants", "before"))
    (root,) = roots
    assert root != ROOT and not root.exists() and not root.parent.exists()
    assert str(root) not in _worktrees()


def test_a_failed_run_ends_in_one_line_and_the_record_keeps_the_runs_before(
        tmp_path, monkeypatch, capsys):
    calls = []

    def runner(command, env, cwd=None, timeout=None):
        """The probe finds each version's own package; the third run fails; the others write
        what a job writes (metrics, the same model files)."""
        calls.append(Path(cwd))
        assert env["PYTHONPATH"].split(":")[0] == str(cwd)
        assert env["SPARK_CONF_DIR"] == str(Path(cwd) / "conf")
        if command[-1].endswith("import_probe.py"):
            found = str(Path(cwd) / "sodm_spark" / "__init__.py")
            return subprocess.CompletedProcess(command, 0, json.dumps(
                {"driver": found, "workers": [found]}) + "\n", ""), 9.0
        if len(calls) == 5:  # two probes, two runs, then the failure
            return subprocess.CompletedProcess(command, 4, "", "WARN a\n\nerror: it broke\n"), 2.0
        Path(command[command.index("--metrics-out") + 1]).write_text(
            json.dumps({"train_seconds": 1.5, "test_accuracy": 0.875}))
        model = Path(command[command.index("--model-out") + 1]) / "v-000001"
        model.mkdir(parents=True)
        (model / "metadata.json").write_text("{}")
        return subprocess.CompletedProcess(command, 0, "", ""), 3.0

    monkeypatch.setattr(bench, "timed_run", runner)
    assert bench.main(_argv(tmp_path, "--variants", "classic,before", "--repeat", "2")) == 1
    out = capsys.readouterr().out.strip().split("\n")
    assert out[-1].startswith("bench_back_ends: the classic run of round 2 failed (exit code 4): "
                              "WARN a | error: it broke; record: ")
    saved = json.loads((tmp_path / "record.json").read_text())
    assert [(r["variant"], r["round"]) for r in saved["runs"]] == [("classic", 0), ("before", 0),
                                                                   ("classic", 1)]
    assert saved["finished_utc"] is None and saved["failure"] in out[-1]
    assert saved["summary"]["medians"]["classic"]["runs"] == 1
    assert saved["summary"]["ratios"]["classic/before"]["median"] == 1.0
    assert saved["summary"]["models_identical"] is True
    assert saved["imports"]["classic"]["driver"] == str(ROOT / "sodm_spark" / "__init__.py")
    before = calls[0]  # the worktree's probe came first
    assert before != ROOT and not before.exists() and str(before) not in _worktrees()


def test_a_version_that_imports_another_checkouts_package_is_refused(tmp_path, monkeypatch,
                                                                     capsys):
    def runner(command, env, cwd=None, timeout=None):
        elsewhere = "/elsewhere/sodm_spark/__init__.py"
        return subprocess.CompletedProcess(command, 0, json.dumps(
            {"driver": str(Path(cwd) / "sodm_spark/__init__.py"), "workers": [elsewhere]}), ""), 1.0

    monkeypatch.setattr(bench, "timed_run", runner)
    assert bench.main(_argv(tmp_path, "--variants", "classic")) == 1
    assert "imports sodm_spark from ['/elsewhere/sodm_spark/__init__.py']" in \
        capsys.readouterr().out


def test_a_before_git_cannot_check_out_is_a_setting(tmp_path, capsys):
    assert bench.main(["--before", "no-such-ref-anywhere", "--variants", "before",
                       "--record", str(tmp_path / "record.json")]) == 2
    assert "--before no-such-ref-anywhere: git cannot check it out" in capsys.readouterr().out


def test_the_default_record_goes_under_back_ends_by_data_and_rows():
    path = bench.default_record_path(ROOT, "built-in", [2000], kind="back_ends")
    assert path.parent == ROOT / report.RECORDS
    assert path.name.startswith("built-in-2000-20") and path.suffix == ".json"


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (absent, or a zombie its new parent has yet to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_command_is_timed_and_its_whole_group_killed_past_its_timeout(tmp_path):
    import os
    import time

    from job_runs import timed_run

    done, wall = timed_run(["sh", "-c", "echo out; echo err >&2; exit 3"], dict(os.environ))
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n") and wall > 0
    pid_file = tmp_path / "pid"
    started = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):  # a grandchild, as spark-submit's JVM is
        timed_run(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], dict(os.environ),
                  timeout=1.0)
    assert time.perf_counter() - started < 10
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild), "the command's background process outlived the timeout"
