"""The timeline of a whole training command (sodm_spark.core.timeline; docs/design.md §6): its
arithmetic, the command's start read from /proc, and the stages a run of the job records."""
import json
import os
import sys
import time
from pathlib import Path

import pytest

from sodm_spark.core import timeline as timeline_module
from sodm_spark.core.timeline import SPARK_SUBMIT_CLASS, Timeline, command_started

ROOT = Path(__file__).resolve().parents[1]


def _closed_timeline():
    """A timeline 10 s long whose three stages were measured elsewhere (perf_counter values
    written out), the whole fixed by end()."""
    origin = time.perf_counter() - 10.0
    timeline = Timeline(origin)
    timeline.add("reading", 2.0, origin + 1.0)
    timeline.add("level 1", 3.0, origin + 5.0)
    timeline.add("start-up", 1.0, origin)  # out of order: kept in the order they ran
    timeline.end()
    return timeline, origin


def test_stages_and_other_add_up_to_the_whole():
    timeline, origin = _closed_timeline()
    record = timeline.to_dict()
    assert [stage["stage"] for stage in record["stages"]] == ["start-up", "reading", "level 1"]
    assert [stage["start"] for stage in record["stages"]] == pytest.approx([0.0, 1.0, 5.0])
    assert record["whole"] >= 10.0
    assert record["other"] == pytest.approx(record["whole"] - 6.0)
    assert sum(s["seconds"] for s in record["stages"]) + record["other"] == \
        pytest.approx(record["whole"], abs=1e-12)
    # the whole stays fixed once ended
    time.sleep(0.01)
    assert timeline.to_dict()["whole"] == record["whole"]
    lines = timeline.lines()
    assert lines[0].split() == ["stage", "start", "s", "seconds", "share"]
    assert [line.split()[0] for line in lines[1:]] == ["start-up", "reading", "level", "other",
                                                       "whole"]
    shares = [float(line.split()[-1].rstrip("%")) for line in lines[1:-1]]
    assert sum(shares) == pytest.approx(100.0, abs=0.3) and lines[-1].endswith("100.0%")


def test_a_timed_block_is_a_stage_and_touching_stages_are_not_overlapping():
    timeline = Timeline(time.perf_counter())
    with timeline.stage("reading"):
        time.sleep(0.01)
    with timeline.stage("writing"):
        pass
    reading, writing = timeline.stages
    assert reading.seconds >= 0.01 and writing.started >= reading.ended
    timeline.add("touching", 0.5, writing.ended)  # begins where writing ended
    record = timeline.to_dict()
    assert record["other"] >= 0.0
    assert sum(s["seconds"] for s in record["stages"]) + record["other"] == \
        pytest.approx(record["whole"], abs=1e-12)


def test_overlapping_stages_and_impossible_ones_are_refused():
    timeline, origin = _closed_timeline()
    with pytest.raises(ValueError, match="'search'.*overlaps stage 'reading'"):
        timeline.add("search", 1.0, origin + 2.5)
    with pytest.raises(ValueError, match="overlaps stage 'level 1'"):
        timeline.add("around", 10.0, origin + 4.0)  # holds level 1 inside it
    with pytest.raises(ValueError, match="before the command's start"):
        timeline.add("early", 0.5, origin - 1.0)
    with pytest.raises(ValueError, match="seconds must be"):
        timeline.add("negative", -1.0, origin + 3.0)
    assert len(timeline.stages) == 3  # nothing refused was kept
    timeline.add("between", 1.0, origin + 3.0)  # the gap between reading and level 1 is free
    assert timeline.to_dict()["other"] == pytest.approx(timeline.whole - 7.0)


def test_this_process_started_after_boot_and_before_now():
    psutil = pytest.importorskip("psutil")
    started = command_started()
    now = time.perf_counter()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert now - uptime < started < now
    # psutil's create time (the same stat field on the wall clock) as the reference; pytest
    # was not started by spark-submit
    age = time.time() - psutil.Process().create_time()
    assert now - started == pytest.approx(age, abs=1.5)
    assert started <= timeline_module._IMPORTED  # the process began before this module's import


def _fake_proc(files):
    def read(path):
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]
    return read


def _stat(pid, parent, ticks):
    # field 2, the command, holds a space and a parenthesis: the fields are read after the last ')'
    return (f"{pid} (python3 (x) y) S {parent} 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 "
            f"{ticks} 1000 100 0 0")


def test_a_driver_started_by_spark_submit_counts_from_the_jvm_s_start():
    hz = os.sysconf("SC_CLK_TCK")
    files = {"/proc/self/stat": _stat(900, 4242, 500 * hz),
             "/proc/4242/stat": _stat(4242, 1, 400 * hz),
             "/proc/4242/cmdline": "\0".join(["/usr/bin/java", "-cp", "/opt/spark/jars/*",
                                              SPARK_SUBMIT_CLASS, "jobs/train_sodm.py"]),
             "/proc/uptime": "600.00 1000.00\n"}
    # 600 s since boot, the JVM started at 400 s: 200 s ago; this process at 500 s
    assert time.perf_counter() - command_started(_fake_proc(files)) == pytest.approx(200.0,
                                                                                   abs=0.5)
    files["/proc/4242/cmdline"] = "\0".join(["/bin/bash", "run.sh"])
    assert time.perf_counter() - command_started(_fake_proc(files)) == pytest.approx(100.0,
                                                                                   abs=0.5)
    del files["/proc/4242/cmdline"]  # a parent this process cannot read: its own start
    assert time.perf_counter() - command_started(_fake_proc(files)) == pytest.approx(100.0,
                                                                                   abs=0.5)
    # no /proc/uptime: the boot time of /proc/stat against the wall clock
    del files["/proc/uptime"]
    files["/proc/stat"] = f"cpu  1 2 3\nbtime {int(time.time()) - 600}\nprocesses 7\n"
    assert time.perf_counter() - command_started(_fake_proc(files)) == pytest.approx(100.0,
                                                                                   abs=1.5)


def test_without_proc_the_command_starts_at_the_import():
    assert command_started(_fake_proc({})) == timeline_module._IMPORTED


sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402


def _assert_adds_up(record):
    stages = record["stages"]
    starts = [stage["start"] for stage in stages]
    assert starts == sorted(starts) and starts[0] == pytest.approx(0.0, abs=1e-6)
    for before, after in zip(stages, stages[1:]):  # none overlaps the next
        assert before["start"] + before["seconds"] <= after["start"] + 1e-6
    assert record["other"] >= 0.0
    assert sum(stage["seconds"] for stage in stages) + record["other"] == \
        pytest.approx(record["whole"], abs=1e-9)
    assert stages[-1]["start"] + stages[-1]["seconds"] <= record["whole"] + 1e-9


def test_the_job_records_the_stages_that_ran(spark, tmp_path, capsys, monkeypatch):
    from sodm_spark.models import compression

    # a compression on these small levels too: the job's compression stage and lines
    monkeypatch.setattr(compression, "AUTO_ABOVE", 300)
    monkeypatch.setattr(compression, "AUTO_POINTS", 200)
    metrics_path = tmp_path / "metrics.json"
    # no hyperparameters: the default search runs first
    assert train_sodm.main(["--rows", "2000", "--levels", "1", "--global-step", "none",
                            "--metrics-out", str(metrics_path),
                            "--model-out", str(tmp_path / "model")]) == 0
    metrics = json.loads(metrics_path.read_text())
    record = metrics["timeline"]
    names = [stage["stage"] for stage in record["stages"]]
    levels = [f"level {entry['level']}" for entry in metrics["levels"]]
    expected = ["start-up", "reading", "column statistics", "validation slice", "partitioning",
                "search", *levels, "compression", "test scoring", "calibration", "writing"]
    assert names == expected
    _assert_adds_up(record)
    # each level's stage is its record's seconds
    seconds = {stage["stage"]: stage["seconds"] for stage in record["stages"]}
    assert [seconds[name] for name in levels] == [entry["seconds"]
                                                  for entry in metrics["levels"]]
    out = capsys.readouterr().out
    table = out.split("timeline of the command (seconds from its start):\n", 1)[1].splitlines()
    assert [line.split()[0] for line in table[1:len(names) + 1]] == \
        [name.split()[0] for name in names]
    assert table[len(names) + 1].split()[0] == "other"
    assert table[len(names) + 2].split()[:2] == ["whole", f"{record['whole']:.2f}"]
    assert "compression candidates on the validation slice" in out


def test_the_linear_job_records_dsvrg_s_stages(spark, tmp_path):
    metrics_path = tmp_path / "metrics.json"
    assert train_sodm.main(["--kernel", "linear", "--rows", "2000", "--lam", "10",
                            "--epochs", "3", "--metrics-out", str(metrics_path)]) == 0
    metrics = json.loads(metrics_path.read_text())
    record = metrics["timeline"]
    assert [stage["stage"] for stage in record["stages"]] == [
        "start-up", "reading", "partitioning", "epochs", "calibration", "writing"]
    _assert_adds_up(record)
    # the epochs' stage holds every epoch's seconds
    epochs = next(s for s in record["stages"] if s["stage"] == "epochs")
    assert epochs["seconds"] >= sum(entry["seconds"] for entry in metrics["epochs"]) - 1e-6
