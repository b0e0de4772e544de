"""sodm_spark.ops.cluster: a real standalone Master + Workers on loopback, and SODM submitted to it.

The daemons are real JVMs from pyspark's bundled spark-class; every fixture stops what it
started, also when a test fails.
"""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from conftest import contents
from sodm_spark.core.worker_heap import OPT_OUT_ENV
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.ops.cluster import (LIGHT_DAEMON_JAVA_OPTS as LIGHT_JVM, ClusterAddresses,
                                    ClusterError, LoopbackCluster, _alive, read_state,
                                    start_cluster)

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 5

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None and not os.environ.get("JAVA_HOME"),
    reason="a standalone cluster needs Java 17")


def port_is_free(port):
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count, span=1):
    """``count`` bases of ``span`` consecutive free ports, all distinct, below the ephemeral
    range (32768+) so that no connection's random local port takes one meanwhile."""
    chosen = []
    for base in range(21000, 32000, 10):
        block = range(base, base + span)
        if all(port_is_free(p) for p in block):
            chosen.append(base)
            if len(chosen) == count:
                return chosen
    raise RuntimeError("no free ports between 21000 and 32000")


def run_cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "sodm_spark.cluster", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def java_command(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def test_cli_records_the_jvm_pids_and_stop_ends_exactly_those(tmp_path):
    master_port, webui_port, worker_webui_port = free_ports(3)
    state_dir = tmp_path / "state"
    # a process started before the cluster, not recorded by it: stop must leave it alone
    bystander = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        started = run_cli("start", "--workers", "1", "--memory", "512m", "--state-dir",
                          str(state_dir), "--port", str(master_port), "--webui-port",
                          str(webui_port), "--worker-webui-port", str(worker_webui_port),
                          "--conf-dir", str(ROOT / "conf"))
        assert started.returncode == 0, started.stderr
        assert f"spark://127.0.0.1:{master_port}" in started.stdout
        state = read_state(state_dir)
        assert [e["role"] for e in state["processes"]] == ["master", "worker-1"]
        for entry in state["processes"]:
            command = java_command(entry["pid"])  # the JVM itself, not a wrapper shell
            assert Path(command[0].decode()).name == "java"
            assert entry["main_class"].encode() in command
        status = run_cli("status", "--state-dir", str(state_dir))
        assert status.returncode == 0 and "alive workers 1" in status.stdout
        stopped = run_cli("stop", "--state-dir", str(state_dir), timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        pids = [e["pid"] for e in state["processes"]]
        assert f"stopped pids {pids}" in stopped.stdout
        assert not any(_alive(pid) for pid in pids)
        assert bystander.poll() is None  # still running
        assert read_state(state_dir) is None
        gone = run_cli("status", "--state-dir", str(state_dir))
        assert gone.returncode == 1 and "no cluster recorded" in gone.stdout
    finally:
        run_cli("stop", "--state-dir", str(state_dir), timeout=120)
        os.killpg(bystander.pid, signal.SIGKILL)
        bystander.wait()


def test_start_refuses_a_taken_port_and_starts_nothing(tmp_path):
    (port,) = free_ports(1)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # despite TIME_WAITs
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(ClusterError, match=f"port {port} on 127.0.0.1 is already in use"):
            start_cluster(workers=1, state_dir=tmp_path,
                          addresses=ClusterAddresses(port=port, webui_port=port + 1,
                                                     worker_webui_port=port + 2))
    assert read_state(tmp_path) is None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    master_port, webui_port, worker_webui_port = free_ports(3, span=WORKERS)
    loopback = LoopbackCluster(
        workers=WORKERS, cores_per_worker=1, memory="1g",
        state_dir=tmp_path_factory.mktemp("cluster-state"), port=master_port,
        webui_port=webui_port, worker_webui_port=worker_webui_port,
        conf_dir=ROOT / "conf", timeout=240)
    request.addfinalizer(loopback.stop)  # before start: a half-started cluster is stopped too
    loopback.start()
    return loopback


def zip_package(path):
    """sodm_spark's sources as a --py-files zip (a wheel does not import on executors)."""
    with zipfile.ZipFile(path, "w") as archive:
        for source in sorted((ROOT / "sodm_spark").rglob("*.py")):
            archive.write(source, source.relative_to(ROOT))
    return path


def event_log_records(directory):
    records = []
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file() and not path.name.startswith(".") and "appstatus" not in path.name:
            records += [json.loads(line) for line in path.read_text().splitlines() if line]
    return records


def submit_command(cluster, tmp_path, events, *job_args, ui_port=None, conf=()):
    """(command, env) of a spark-submit of jobs/train_sodm.py to ``cluster``, logging events;
    with ``ui_port`` the driver serves its status API (the Spark UI's /api/v1) there; ``conf``:
    more ``key=value`` Spark settings."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_CONF_DIR=str(ROOT / "conf"),
               SPARK_LOCAL_IP="127.0.0.1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = [
        "spark-submit", "--master", cluster.master_url,
        "--py-files", str(zip_package(tmp_path / "sodm_spark.zip")),
        "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events}",
        "--conf", "spark.eventLog.compress=false",
        "--conf", "spark.eventLog.rolling.enabled=false",
        # every executor registered before the first stage, so every one gets tasks
        "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
        *(["--conf", "spark.ui.enabled=false"] if ui_port is None else
          ["--conf", f"spark.ui.port={ui_port}"]),
        # short-lived JVMs on a 2-core machine: the client JIT costs far less CPU
        "--driver-java-options", LIGHT_JVM, "--conf", f"spark.executor.extraJavaOptions={LIGHT_JVM}",
        # numba's cache for the zipped sources goes to the cluster's folder, not the user's
        # ~/.cache: one for every job, as a machine's executors share theirs
        # (sodm_spark.core.zip_kernel_cache keys it by the sources, not the zip's path)
        "--conf", f"spark.executorEnv.XDG_CACHE_HOME={cluster.state_dir / 'cache'}",
        *(item for setting in conf for item in ("--conf", setting)),
        str(ROOT / "jobs" / "train_sodm.py"), *job_args]
    return command, env


# One job serves every test of a fit on the cluster, run twice: undisturbed (reference_run) and
# with executors killed (faulty_run). 6,000 rows, levels 3 → 1 with p = 2: 8 top partitions, more
# than the 5 executors, so the work spreads over all of them. --tune on 4 grid points searches all
# 8 top partitions (about 5,400 rows, more than the second round's one piece of p × 2,500 rows:
# the second round runs, its 3 finalists on that piece); --stop-level 1 without automatic
# stopping writes level 1's model (no global step follows level 0); --global-step always runs the
# step, on 30 centres (not kept: a kept step's model is written uncompressed); --max-sv 50
# --compress-method largest compresses level 1 in two passes over its partitions (the default
# method fits on the rows the level's tasks returned, on the driver: no Spark work there to lose).
CLUSTER_JOB = ("--levels", "3", "--p", "2", "--rows", "6000", "--seed", "4", "--tune",
               "--grid", "gamma=1,2 lam=1e3,1e4 theta=0.1 v=0.2", "--stop-level", "1",
               "--no-auto-stop", "--global-step", "always", "--global-centres", "30",
               "--max-sv", "50", "--compress-method", "largest")
LEVELS, LEVEL_PARTITIONS = [3, 2, 1], [8, 4, 2]
# The parts of the fit the faulty run kills an executor in, in the order they run, by the
# descriptions the fit gives their Spark jobs (spark/tune.py, spark/sodm/levels.py,
# spark/sodm/global_step.py, spark/sodm/level_model.py); the second round's solves are its
# finalists' job (the job before it only gathers the sampled rows); a level below the top
# reads the levels above it that the executors cached.
LEVEL_PART = "a level below the top"
PART_JOBS = {"the search's second round": re.compile(r"SODM tune: \d+ finalists"),
             LEVEL_PART: re.compile(r"SODM level [12]: solve"),
             "the global step": re.compile(r"SODM global step: "),
             "the compression": re.compile(r"SODM: .*the compression's")}


def job_outputs(directory):
    return ("--model-out", str(directory / "model"),
            "--metrics-out", str(directory / "metrics.json"))


@pytest.fixture(scope="module")
def reference_run(cluster, tmp_path_factory):
    """The undisturbed CLUSTER_JOB on the cluster: (its directory, its event log records)."""
    directory = tmp_path_factory.mktemp("reference")
    (directory / "events").mkdir()
    command, env = submit_command(cluster, directory, directory / "events", *CLUSTER_JOB,
                                  *job_outputs(directory))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return directory, event_log_records(directory / "events")


def test_sodm_job_runs_on_five_executors(cluster, reference_run):
    assert cluster.status()["alive_workers"] == WORKERS
    directory, records = reference_run
    start = next(r for r in records if r["Event"] == "SparkListenerApplicationStart")
    assert start["App ID"].startswith("app-"), (  # standalone apps are app-*, local ones local-*
        f"application {start['App ID']} ran in local mode: the driver ignored spark-submit's "
        f"--master {cluster.master_url}")
    added = {r["Executor ID"]: r["Executor Info"]["Host"] for r in records
             if r["Event"] == "SparkListenerExecutorAdded"}
    assert len(added) == WORKERS and set(added.values()) == {"127.0.0.1"}
    ran_tasks = {r["Task Info"]["Executor ID"] for r in records
                 if r["Event"] == "SparkListenerTaskEnd"}
    assert ran_tasks == set(added)  # the work spread over all five executors
    assert "driver" not in ran_tasks

    metrics = json.loads((directory / "metrics.json").read_text())
    assert [entry["level"] for entry in metrics["levels"]] == LEVELS
    assert [entry["partitions"] for entry in metrics["levels"]] == LEVEL_PARTITIONS
    assert metrics["test_accuracy"] > 0.8
    model = KernelExpansion.load(directory / "model")
    assert model.support_vectors.shape[0] == metrics["n_sv"] > 0


def test_second_start_on_the_same_state_dir_refuses(cluster):
    # the running cluster's own ports: were the refusal missing, the start would still fail
    refused = run_cli("start", "--workers", "1", "--state-dir", str(cluster.state_dir),
                      "--port", str(cluster.options["port"]),
                      "--webui-port", str(cluster.options["webui_port"]))
    assert refused.returncode == 2
    assert "is still running" in refused.stderr and str(cluster.state_dir) in refused.stderr
    assert "sodm_spark.cluster stop --state-dir" in refused.stderr
    status = cluster.status()  # the running cluster is untouched
    assert status["alive_workers"] == WORKERS
    assert all(entry["running"] for entry in status["processes"])


# 6,000 rows: the job's 2 input slices (one per 5,000 rows, in both modes) are dealt into the 5
# partitions; nothing the test compares grows with the rows
DSVRG_JOB = ("--kernel", "linear", "--rows", "6000", "--epochs", "3", "--epoch-tol", "0",
             "--partitions", "5", "--seed", "3")


def test_dsvrg_on_five_executors_equals_local_mode_and_leaves_no_blocks(cluster, tmp_path):
    """DSVRG's resident blocks on a real cluster: the same w as in local mode bit for bit
    (the hops run in the same order whichever executors hold the blocks), every task finds
    the blocks another executor of the host wrote, and no block file outlives the
    application."""
    runs = {}
    for name in ("cluster", "local"):
        out = tmp_path / name
        (out / "events").mkdir(parents=True)
        command, env = submit_command(cluster, out, out / "events", *DSVRG_JOB,
                                      *job_outputs(out))
        if name == "local":
            command[command.index("--master") + 1] = "local[2]"
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
        runs[name] = (json.loads((out / "metrics.json").read_text()),
                      KernelExpansion.load(out / "model"))
    (metrics, model), (local_metrics, local_model) = runs["cluster"], runs["local"]
    np.testing.assert_array_equal(model.support_vectors, local_model.support_vectors)
    assert [e["objective"] for e in metrics["epochs"]] == \
        [e["objective"] for e in local_metrics["epochs"]]
    assert metrics["layout"].startswith("stratified dealing into 5 partitions")
    # one host: every executor finds every block where the driver recorded it, for the
    # 5 hops and the 5 gradient sums of each of 3 epochs
    for run in (metrics, local_metrics):
        assert (run["resident_hits"], run["resident_misses"]) == (30, 0), run
        assert run["layout"].endswith("; 1 turn per epoch")
    # deleted by the fit, or by Spark with the executors' local dirs (the workers clean up
    # an application's dirs shortly after it ends)
    deadline = time.monotonic() + 60
    while list(Path(cluster.state_dir).rglob("sodm-dsvrg-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(Path(cluster.state_dir).rglob("sodm-dsvrg-*"))


def application_id(events_dir) -> str | None:
    """The id of the one application logging into ``events_dir`` (the event log's name)."""
    names = [p.name.split(".")[0] for p in Path(events_dir).iterdir()
             if p.name.startswith("app-")]
    return names[0] if len(names) == 1 else None


def executor_pids(app_id, worker_root):
    """Executor JVMs of application ``app_id`` started by this test's own workers (their
    command line names the application; their working directory lies under the workers'
    work dirs), never another application's on the same machine."""
    found = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True,
                           text=True)
    mine = []
    for pid in sorted(int(pid) for pid in found.stdout.split()):
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(f"/proc/{pid}/cwd")).resolve()
        except OSError:
            continue  # ended meanwhile
        if app_id.encode() in arguments and Path(worker_root).resolve() in cwd.parents:
            mine.append(pid)
    return mine


def _stop(job, decoy):
    """End the job's process group if it still runs, and the decoy executor."""
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    decoy.kill()
    decoy.wait()


def driver_status(ui_port, path):
    """The JSON at ``path`` of the driver's status API (the Spark UI's /api/v1)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/v1/{path}",
                                timeout=30) as reply:
        return json.load(reply)


def executors_running(ui_port, app_id, pattern) -> set:
    """Ids of the executors running a task, now, of a running job of ``app_id`` whose
    description ``pattern`` matches."""
    app = f"applications/{app_id}"
    running = set()
    for job in driver_status(ui_port, f"{app}/jobs?status=running"):
        if not pattern.match(job.get("description") or ""):
            continue
        for stage in job["stageIds"]:
            for attempt in driver_status(ui_port, f"{app}/stages/{stage}"):
                if attempt["status"] == "ACTIVE":
                    running.update(task["executorId"] for task in driver_status(
                        ui_port, f"{app}/stages/{stage}/{attempt['attemptId']}/taskList"
                        "?status=running"))
    return running


def executor_ids(app_id, worker_root) -> dict:
    """{executor id: pid} of the executor JVMs :func:`executor_pids` finds, each id read from
    its JVM's command line."""
    found = {}
    for pid in executor_pids(app_id, worker_root):
        try:
            arguments = java_command(pid)
        except OSError:
            continue  # ended meanwhile
        if b"--executor-id" in arguments:
            found[arguments[arguments.index(b"--executor-id") + 1].decode()] = pid
    return found


def part_job_running(ui_port, app_id, pattern) -> bool:
    """Whether a job of ``app_id`` whose description ``pattern`` matches runs now."""
    return any(pattern.match(job.get("description") or "")
               for job in driver_status(ui_port, f"applications/{app_id}/jobs?status=running"))


def freeze(pids, app_id) -> list:
    """SIGSTOP those of ``pids`` that are still executors of ``app_id`` (a pid read 0.2 s
    ago may have ended): the ones stopped."""
    frozen = []
    for pid in pids:
        with contextlib.suppress(OSError):  # ended meanwhile (ProcessLookupError included)
            if app_id.encode() in java_command(pid):
                os.kill(pid, signal.SIGSTOP)
                frozen.append(pid)
    return frozen


def thaw(pids):
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # killed meanwhile
            os.kill(pid, signal.SIGCONT)


#: How long the frozen executors are left before the driver's task list is read: long enough
#: for the driver to take in every result an executor sent before it was frozen, so that a task
#: still listed as running then is one its frozen executor is in the middle of.
SETTLE_SECONDS = 0.3


def kill_in_each_part(job, ui_port, events, worker_root, timeout=600):
    """SIGKILL one executor JVM of ``job``'s application in each part of PART_JOBS, in their
    order, while it runs a task of the part: never one killed before. The job prints nothing as
    its second round or its compression starts, so the driver's status API says when each
    part's jobs run. Some parts' tasks end within 50 ms (the global step only collects a
    level's rows onto the driver), less than the status API takes to list a task and a kill
    takes to follow: as soon as a part's job runs, every executor of the application is
    frozen (SIGSTOP), and once the driver has taken in what they sent before
    (:data:`SETTLE_SECONDS`), one listed as running a task of the part is killed and the others
    go on (SIGCONT). Returns [(part, executor id, pid)] of the kills made before the job
    ended."""
    kills: list = []
    parts = list(PART_JOBS.items())
    deadline = time.monotonic() + timeout
    live: dict = {}
    refreshed = 0.0
    while parts and job.poll() is None and time.monotonic() < deadline:
        app_id = application_id(events)
        if app_id is None:
            time.sleep(0.02)
            continue
        pattern = parts[0][1]
        try:
            running = part_job_running(ui_port, app_id, pattern)
        except (OSError, ValueError):  # the status API not up yet ("Spark is starting up",
            running = False  # not JSON)
        if not running:
            if time.monotonic() > refreshed + 0.2:  # ready for the moment the part starts
                live, refreshed = executor_ids(app_id, worker_root), time.monotonic()
            time.sleep(0.01)
            continue
        frozen = freeze([pid for executor, pid in live.items()
                         if executor not in {killed for _, killed, _ in kills}], app_id)
        try:
            time.sleep(SETTLE_SECONDS)
            try:
                busy = executors_running(ui_port, app_id, pattern)
            except (OSError, ValueError):  # a stage ended between two requests
                busy = set()
            live, refreshed = executor_ids(app_id, worker_root), time.monotonic()
            victims = sorted((busy & set(live)) - {killed for _, killed, _ in kills})
            if victims:
                os.kill(live[victims[0]], signal.SIGKILL)
                kills.append((parts.pop(0)[0], victims[0], live[victims[0]]))
        finally:
            thaw(frozen)
    return kills


def part_tasks(records, pattern) -> tuple:
    """(task attempts, failed ones, shuffle records read) of the jobs whose description
    ``pattern`` matches, from an application's event log: the tasks that ended while such a
    job ran (the driver runs one job at a time)."""
    attempts = failed = read = 0
    running = None
    for record in records:
        if record["Event"] == "SparkListenerJobStart":
            description = record["Properties"].get("spark.job.description") or ""
            running = record["Job ID"] if pattern.match(description) else None
        elif record["Event"] == "SparkListenerJobEnd" and record["Job ID"] == running:
            running = None
        elif record["Event"] == "SparkListenerTaskEnd" and running is not None:
            attempts += 1
            failed += record["Task End Reason"]["Reason"] != "Success"
            metrics = record.get("Task Metrics") or {}
            read += metrics.get("Shuffle Read Metrics", {}).get("Total Records Read", 0)
    return attempts, failed, read


@dataclass
class FaultyRun:
    """What :func:`faulty_run` saw: its directory, the kills :func:`kill_in_each_part` made,
    the job's exit status, and whether the decoy executor outlived the kills."""
    directory: Path
    kills: list
    returncode: int
    decoy_survived: bool

    def output(self) -> str:
        return ((self.directory / "stdout").read_text()[-2000:]
                + (self.directory / "stderr").read_text()[-4000:])

    def removed_executors(self) -> set:
        return {r["Executor ID"] for r in event_log_records(self.directory / "events")
                if r["Event"] == "SparkListenerExecutorRemoved"}


@pytest.fixture(scope="module")
def faulty_run(cluster, tmp_path_factory):
    """CLUSTER_JOB on the cluster with one executor JVM killed in each part of PART_JOBS, while
    it runs a task of that part (:func:`kill_in_each_part`); the two tests below judge it."""
    directory = tmp_path_factory.mktemp("faulty")
    (directory / "events").mkdir()
    (ui_port,) = free_ports(1)
    # The executors keep PySpark's whole-heap collection after every task
    # (sodm_spark.core.worker_heap's opt-out): a task then waits for the collection the one
    # before it on its worker started, which keeps the global step's and the compression's
    # tasks (tens of ms of work each) running long enough for kill_in_each_part to find one.
    # What the tests check (the recovery, the same model) does not depend on it.
    command, env = submit_command(cluster, directory, directory / "events", *CLUSTER_JOB,
                                  *job_outputs(directory), ui_port=ui_port,
                                  conf=[f"spark.executorEnv.{OPT_OUT_ENV}=1"])
    # another application's executor 0 on the same machine: the test must leave it alone
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)",
                              "org.apache.spark.executor.CoarseGrainedExecutorBackend",
                              "--executor-id", "0", "--app-id", "app-20260101000000-9999"],
                             cwd=directory)
    with open(directory / "stdout", "w") as out, open(directory / "stderr", "w") as err:
        job = subprocess.Popen(command, env=env, stdout=out, stderr=err, start_new_session=True)
    try:
        kills = kill_in_each_part(job, ui_port, directory / "events", cluster.state_dir)
        returncode = job.wait(timeout=600)
        decoy_survived = decoy.poll() is None
    finally:
        _stop(job, decoy)
    return FaultyRun(directory, kills, returncode, decoy_survived)


def test_a_killed_executor_costs_time_not_the_model(reference_run, faulty_run):
    """An executor JVM killed while a level below the top runs: Spark re-runs its tasks (and
    recomputes the cached levels it held) and the model equals an uninterrupted run's, bit for
    bit."""
    assert faulty_run.returncode == 0, faulty_run.output()
    assert faulty_run.decoy_survived, "the test killed another application's executor"
    killed = [executor for part, executor, _ in faulty_run.kills if part == LEVEL_PART]
    assert killed, f"no executor killed while a level below the top ran: {faulty_run.kills}"
    assert set(killed) <= faulty_run.removed_executors(), \
        "Spark never noticed the lost executor"
    expected = KernelExpansion.load(reference_run[0] / "model")
    model = KernelExpansion.load(faulty_run.directory / "model")
    np.testing.assert_array_equal(model.support_vectors, expected.support_vectors)
    np.testing.assert_array_equal(model.coef, expected.coef)


def test_executors_killed_in_the_second_round_global_step_and_compression(reference_run,
                                                                           faulty_run):
    """One executor JVM killed in each part of a fit beyond its levels — the search's second
    round, the global step, the compression — (and in a level, see the test above), while it
    runs a task of that part: Spark re-runs the lost tasks and recomputes the blocks the
    executor held, and the model written equals an uninterrupted run's byte for byte."""
    reference, expected_records = reference_run
    metrics = json.loads((reference / "metrics.json").read_text())
    # the configuration runs every part: otherwise no kill below could land in it
    assert metrics["tuning"]["final_round"]["pieces"] == 1
    assert metrics["best_level"] == 1
    assert metrics["global_step"]["ran"] and not metrics["global_step"]["kept"]
    assert metrics["compression"]["compressed"]
    assert metrics["compression"]["passes_over_level"] == 2

    faulty, kills = faulty_run.directory, faulty_run.kills
    assert faulty_run.decoy_survived, "the test killed another application's executor"
    assert faulty_run.returncode == 0, faulty_run.output()
    missed = [part for part in PART_JOBS if part not in {killed[0] for killed in kills}]
    assert not missed, (f"no executor killed in {missed[0]}: none of its tasks was seen "
                        f"running (the kills made: {kills})")

    records = event_log_records(faulty / "events")
    removed = faulty_run.removed_executors()
    assert {killed for _, killed, _ in kills} <= removed, "Spark did not notice every loss"
    for part, pattern in PART_JOBS.items():  # the loss fell on the part's own tasks
        attempts, failed, read = part_tasks(records, pattern)
        expected_attempts, _, expected_read = part_tasks(expected_records, pattern)
        assert failed or attempts > expected_attempts or read > expected_read, (
            f"{part}: no task failed or re-ran ({attempts} attempts, {read} shuffle records "
            f"read; uninterrupted {expected_attempts}, {expected_read})")

    faulty_metrics = json.loads((faulty / "metrics.json").read_text())
    assert faulty_metrics["best_level"] == metrics["best_level"]
    assert faulty_metrics["tuning"]["best"] == metrics["tuning"]["best"]

    def finalists(run):  # the second round's results, which the retried task computed again
        return [(p["validation_accuracy"], p["sweeps_max"], p["converged"])
                for p in run["tuning"]["final_round"]["points"]]

    def global_fit(run):  # the global step's model is not written: its report stands for it
        return {key: run["global_step"][key] for key in
                ("form", "lam", "passes", "newton_steps", "objective", "validation_accuracy")}

    assert finalists(faulty_metrics) == finalists(metrics)
    assert global_fit(faulty_metrics) == global_fit(metrics)
    expected = KernelExpansion.load(reference / "model")
    model = KernelExpansion.load(faulty / "model")
    np.testing.assert_array_equal(model.support_vectors, expected.support_vectors)
    np.testing.assert_array_equal(model.coef, expected.coef)
    assert model.intercept is None and expected.intercept is None  # ODM has none
    assert contents(faulty / "model") == contents(reference / "model")


def test_stop_ends_the_daemons_and_their_executors(cluster):
    groups = [entry["pgid"] for entry in cluster.state["processes"]]
    pids = [entry["pid"] for entry in cluster.state["processes"]]
    assert sorted(cluster.stop()) == sorted(pids)
    assert not any(_alive(pid) for pid in pids)
    for group in groups:  # executors and Python workers forked by a Worker went with it
        with pytest.raises(ProcessLookupError):
            os.killpg(group, 0)
