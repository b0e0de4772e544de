"""A Spark standalone cluster on this machine's loopback interface: one Master, N Workers.

    python -m sodm_spark.cluster start --workers 5 [--cores-per-worker 1] [--memory 1g]
    python -m sodm_spark.cluster status | stop      (same --state-dir as start)

The daemons come from pyspark's bundled ``bin/spark-class`` (no separate Spark download), each
with its own work dir and log; their pids go to ``cluster.json`` in the state dir, so ``stop``
(another process, later) ends exactly those. ``spark-class`` runs a launcher and then ``exec``s
java: the recorded pid is the JVM's. Each daemon leads its own process group and ``stop``
signals that group, so the executors a Worker forked (and their Python workers) go too.
``health`` is the probe the docker-compose health checks call. From Python::

    with LoopbackCluster(workers=5) as cluster:
        ...  # spark-submit --master cluster.master_url ...

Pure stdlib: no Spark session is created here.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STATE_FILE = "cluster.json"
# The Master and Workers do little work: the client JIT alone and the serial GC start them with
# about a third of the CPU time of the defaults (which matters on a 2-core machine).
LIGHT_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class ClusterError(RuntimeError):
    """The cluster could not be started, reached or stopped; the message says what to do."""


def default_state_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"sodm-spark-cluster-{os.getuid()}"


def find_spark_home() -> Path:
    """SPARK_HOME if set, else the installed pyspark package (it ships bin/spark-class)."""
    home: str | Path | None = os.environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")  # located, not imported: no JVM here
        if spec is None or spec.origin is None:
            raise ClusterError("pyspark is not installed: pip install 'pyspark>=4.0,<4.1' "
                               "(or set SPARK_HOME to a Spark 4.0 distribution).")
        home = Path(spec.origin).parent
    if not (Path(home) / "bin" / "spark-class").is_file():
        raise ClusterError(f"SPARK_HOME={home} has no bin/spark-class: it is not a Spark "
                           "distribution; unset SPARK_HOME or point it at one.")
    java_home = os.environ.get("JAVA_HOME")
    if (java_home and not (Path(java_home) / "bin" / "java").exists()) or \
            (not java_home and shutil.which("java") is None):
        raise ClusterError(f"no java: JAVA_HOME={java_home!r} and none on PATH; install Java "
                           "17 (apt-get install openjdk-17-jre-headless) or fix JAVA_HOME.")
    return Path(home)


def _check_port_free(host: str, port: int, flag: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # as Java's server sockets do: a closed socket's TIME_WAIT does not block the port
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise ClusterError(f"port {port} on {host} is already in use ({error.strerror}); "
                               f"stop what holds it or pass another {flag}.") from None


def _alive(pid: int) -> bool:
    """The process runs (a zombie does not); reaps it first if it is our own child."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):  # a zombie: exited, not yet reaped
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _is_ours(entry: dict) -> bool:
    """Alive and still the daemon we started (a recycled pid runs something else)."""
    if not _alive(entry["pid"]):
        return False
    try:
        return entry["main_class"].encode() in Path(f"/proc/{entry['pid']}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: trust the pid
        return True


def _running(entry: dict) -> bool:
    """The daemon or anything left in its process group (its executors) still runs."""
    try:
        if _alive(entry["pid"]):
            return True
        os.killpg(entry["pgid"], 0)  # raises unless a process of the group is left
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def read_state(state_dir: str | os.PathLike) -> dict | None:
    path = Path(state_dir) / STATE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ClusterError(f"{path} is not valid JSON ({error}); if no cluster runs from it, "
                           "delete it.") from None


def master_json(webui_url: str, timeout: float = 2.0) -> dict:
    """A Spark web UI's status document (``GET <webui>/json/``)."""
    with urllib.request.urlopen(f"{webui_url.rstrip('/')}/json/", timeout=timeout) as response:
        return json.load(response)


def _alive_workers(webui_url: str, timeout: float = 2.0) -> int | None:
    """How many Workers the Master at ``webui_url`` reports ALIVE (None: no answer)."""
    try:
        workers = master_json(webui_url, timeout).get("workers", [])
    except (OSError, ValueError):
        return None
    return sum(worker.get("state") == "ALIVE" for worker in workers)


class ClusterAddresses(NamedTuple):
    """Where the daemons listen (the ``start`` flags of the same names): the Master's RPC
    ``port`` and web UI ``webui_port`` on ``host``; Worker i's web UI on
    ``worker_webui_port + i - 1``."""

    host: str = "127.0.0.1"
    port: int = 7077
    webui_port: int = 8080
    worker_webui_port: int = 8081


def split_addresses(options: dict) -> tuple[ClusterAddresses, dict]:
    """(the :class:`ClusterAddresses` among keyword ``options``, the others: start_cluster's)."""
    named = {name: options[name] for name in ClusterAddresses._fields if name in options}
    return ClusterAddresses(**named), {k: v for k, v in options.items() if k not in named}


def start_cluster(workers: int = 5, cores_per_worker: int = 1, memory: str = "1g",
                  state_dir: str | os.PathLike | None = None,
                  addresses: ClusterAddresses | None = None,
                  conf_dir: str | os.PathLike | None = None, timeout: float = 120.0,
                  daemon_java_opts: str | None = LIGHT_DAEMON_JAVA_OPTS) -> dict:
    """Start a Master and ``workers`` Workers, listening where ``addresses`` say; return the
    state once all report ALIVE. ``daemon_java_opts`` become SPARK_DAEMON_JAVA_OPTS unless that
    is set already. Refuses a state dir whose cluster still runs. On any failure it stops what
    it started and raises ClusterError naming the logs."""
    host, port, webui_port, worker_webui_port = addresses or ClusterAddresses()
    if workers < 1 or cores_per_worker < 1:
        raise ClusterError(f"workers={workers} and cores_per_worker={cores_per_worker} must "
                           "both be >= 1.")
    state_dir = Path(state_dir or default_state_dir()).resolve()
    previous = read_state(state_dir)
    running = [] if previous is None else [e["pid"] for e in previous["processes"]
                                           if _is_ours(e)]
    if previous is not None and running:
        raise ClusterError(
            f"a cluster started from {state_dir / STATE_FILE} is still running (pids {running}, "
            f"master {previous['master_url']}); run `python -m sodm_spark.cluster stop "
            f"--state-dir {state_dir}` first, or use another --state-dir.")
    spark_home = find_spark_home()
    for flag, first, count in (("--port", port, 1), ("--webui-port", webui_port, 1),
                               ("--worker-webui-port", worker_webui_port, workers)):
        for taken in range(first, first + count):
            _check_port_free(host, taken, flag)
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP=host)
    if daemon_java_opts and not env.get("SPARK_DAEMON_JAVA_OPTS"):
        env["SPARK_DAEMON_JAVA_OPTS"] = daemon_java_opts
    if conf_dir is not None:
        env["SPARK_CONF_DIR"] = str(Path(conf_dir).resolve())
    # the daemons' and their executors' file log (conf/log4j2.properties) beside their console
    # logs, not in whatever directory started the cluster
    env.setdefault("SODM_LOG_FILE", str(state_dir / "logs" / "sodm-spark.log"))
    master_url = f"spark://{host}:{port}"
    state: dict[str, Any] = {
        "master_url": master_url, "webui_url": f"http://{host}:{webui_port}",
        "spark_home": str(spark_home), "state_dir": str(state_dir), "workers": workers,
        "started_at": time.time(), "processes": []}
    plans = [("master", MASTER_CLASS, ["--host", host, "--port", str(port),
                                       "--webui-port", str(webui_port)], env)]
    for index in range(1, workers + 1):
        work_dir = state_dir / f"worker-{index}"
        work_dir.mkdir(exist_ok=True)
        # executors' scratch (shuffle files, spills) under the state dir too, unless chosen
        worker_env = dict(env)
        if "SPARK_LOCAL_DIRS" not in env:
            (work_dir / "local").mkdir(exist_ok=True)
            worker_env["SPARK_LOCAL_DIRS"] = str(work_dir / "local")
        plans.append((f"worker-{index}", WORKER_CLASS, [
            master_url, "--host", host, "--cores", str(cores_per_worker), "--memory", memory,
            "--webui-port", str(worker_webui_port + index - 1),
            "--work-dir", str(work_dir)], worker_env))
    children = []
    try:
        for role, main_class, arguments, role_env in plans:
            log = state_dir / "logs" / f"{role}.log"
            with open(log, "ab") as out:  # each daemon leads its own process group
                children.append(subprocess.Popen(
                    [str(spark_home / "bin" / "spark-class"), main_class, *arguments], env=role_env,
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True))
            state["processes"].append({"role": role, "main_class": main_class, "log": str(log),
                                       "pid": children[-1].pid, "pgid": children[-1].pid})
            # recorded as we go: a failure half-way still leaves stoppable pids behind
            (state_dir / STATE_FILE).write_text(json.dumps(state, indent=2))
        _wait_for_workers(state, children, timeout)
    except BaseException:
        stop_cluster(state_dir)
        raise
    return state


def _wait_for_workers(state: dict, children: list, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    logs = "\n".join(f"  {e['role']}: {e['log']}" for e in state["processes"])
    alive = None
    while time.monotonic() < deadline:
        for child, entry in zip(children, state["processes"]):
            if child.poll() is not None:
                tail = Path(entry["log"]).read_text(errors="replace").splitlines()[-8:]
                raise ClusterError(
                    f"the Spark {entry['role']} (pid {child.pid}) exited with code "
                    f"{child.returncode} while starting; its log {entry['log']} ends with:\n"
                    + "\n".join(tail) + f"\nall logs:\n{logs}")
        alive = _alive_workers(state["webui_url"])
        if alive is not None and alive >= state["workers"]:
            return
        time.sleep(0.5)
    raise ClusterError(
        f"timed out after {timeout:.0f} s: {state['webui_url']}/json/ reports "
        f"{'no answer' if alive is None else f'{alive} ALIVE workers'} of {state['workers']} "
        f"wanted. Read the logs:\n{logs}")


def stop_cluster(state_dir: str | os.PathLike | None = None, timeout: float = 30.0) -> list[int]:
    """Stop the processes recorded in the state dir, with their process groups.

    SIGTERM first (Spark's shutdown hooks end the executors), SIGKILL after ``timeout``
    seconds. Removes the state file; returns the pids that were running and are now gone.
    """
    state_dir = Path(state_dir or default_state_dir())
    state = read_state(state_dir)
    if state is None:
        return []
    entries = [e for e in state["processes"] if _is_ours(e)]
    # workers first (they tell the master they leave); SIGKILL whatever outlives SIGTERM
    for signum, seconds in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        for entry in reversed([e for e in entries if _running(e)]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(entry["pgid"], signum)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(map(_running, entries)):
            time.sleep(0.2)
    still = [e["pid"] for e in entries if _alive(e["pid"])]
    if still:
        raise ClusterError(f"pids {still} survived SIGKILL; state kept in "
                           f"{state_dir / STATE_FILE}.")
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return [e["pid"] for e in entries]


def cluster_status(state_dir: str | os.PathLike | None = None) -> dict | None:
    """The recorded state with ``running`` per process and ``alive_workers`` from the master."""
    state = read_state(state_dir or default_state_dir())
    if state is None:
        return None
    for entry in state["processes"]:
        entry["running"] = _is_ours(entry)
    state["alive_workers"] = _alive_workers(state["webui_url"])
    return state


class LoopbackCluster:
    """Context manager over :func:`start_cluster` / :func:`stop_cluster`.

    Keyword options are :func:`start_cluster`'s (``memory``, ``conf_dir``, ``timeout``, ...)
    and :class:`ClusterAddresses`' (``port``, ``webui_port``, ``worker_webui_port``, ...).
    ``state_dir=None`` uses a fresh temporary directory, removed again by ``stop``.
    """

    def __init__(self, workers: int = 5, state_dir=None, **options):
        self._owns_dir = state_dir is None
        self.state_dir = None if state_dir is None else Path(state_dir)
        addresses = split_addresses(options)[0]  # the defaults of those not given
        self.options = {**addresses._asdict(), **options, "workers": workers}
        self.master_url = f"spark://{addresses.host}:{addresses.port}"
        self.webui_url = f"http://{addresses.host}:{addresses.webui_port}"
        self.state: dict | None = None

    def start(self) -> "LoopbackCluster":
        if self.state_dir is None:
            self.state_dir = Path(tempfile.mkdtemp(prefix="sodm-spark-cluster-"))
        addresses, options = split_addresses(self.options)
        self.state = start_cluster(state_dir=self.state_dir, addresses=addresses, **options)
        return self

    def stop(self) -> list[int]:
        """Stop the cluster (a no-op when none runs); returns the pids it ended."""
        if self.state_dir is None:
            return []
        stopped = stop_cluster(self.state_dir)
        self.state = None
        if self._owns_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir = None
        return stopped

    def status(self) -> dict | None:
        return None if self.state_dir is None else cluster_status(self.state_dir)

    def __enter__(self) -> "LoopbackCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def health(url: str, min_alive_workers: int = 0, timeout: float = 3.0) -> str:
    """Probe a Master's or Worker's web UI (``/json/``): '' if healthy, else why not."""
    try:
        document = master_json(url, timeout=timeout)
    except (OSError, ValueError) as error:
        return f"{url}/json/ did not answer: {error}"
    if "workers" in document:  # a Master
        if document.get("status") != "ALIVE":
            return f"master status is {document.get('status')!r}, not 'ALIVE'"
        alive = _alive_workers(url, timeout)
        if alive is None:  # the master stopped answering after its status document
            return f"{url}/json/ did not answer for its workers"
        if alive < min_alive_workers:
            return f"{alive} ALIVE workers, fewer than {min_alive_workers}"
    elif not document.get("masterwebuiurl"):  # a Worker that has not registered yet
        return "the worker has not registered with a master yet"
    return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sodm_spark.cluster",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start a Master and N Workers on loopback")
    for flag, kind, default, text in [
            ("--workers", int, 5, None), ("--cores-per-worker", int, 1, None),
            ("--memory", str, "1g", "memory each Worker offers its executors"),
            ("--host", str, "127.0.0.1", None), ("--port", int, 7077, "master RPC port"),
            ("--webui-port", int, 8080, "master web UI port"),
            ("--worker-webui-port", int, 8081, "first Worker's web UI port; the others count up"),
            ("--conf-dir", str, None, "SPARK_CONF_DIR for the daemons (log4j2.properties)"),
            ("--timeout", float, 120.0, "seconds to wait for every Worker to be ALIVE")]:
        start.add_argument(flag, type=kind, default=default, help=text)
    for sub in (start, commands.add_parser("stop"), commands.add_parser("status")):
        sub.add_argument("--state-dir", default=str(default_state_dir()),
                         help="where cluster.json, the logs and the work dirs live")
    probe = commands.add_parser("health", help="exit 0 if a Master/Worker web UI is healthy")
    probe.add_argument("url", help="web UI address, e.g. http://localhost:8080")
    probe.add_argument("--min-alive-workers", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            addresses, options = split_addresses(vars(args))
            del options["command"]  # the subcommand, not an option of start_cluster
            state = start_cluster(addresses=addresses, **options)
            print(f"{state['workers']} workers ALIVE at {state['master_url']} (web UI "
                  f"{state['webui_url']}); state in {args.state_dir}/{STATE_FILE}")
        elif args.command == "stop":
            stopped = stop_cluster(args.state_dir)
            print(f"stopped pids {stopped}" if stopped else
                  f"no running cluster recorded in {args.state_dir}")
        elif args.command == "status":
            status = cluster_status(args.state_dir)
            if status is None:
                print(f"no cluster recorded in {args.state_dir}")
                return 1
            print(f"master {status['master_url']}  web UI {status['webui_url']}  "
                  f"alive workers {status['alive_workers']}")
            for e in status["processes"]:
                print(f"  {e['role']:<10} pid {e['pid']:<8} "
                      f"{'running' if e['running'] else 'gone':<8} {e['log']}")
            return 0 if all(e["running"] for e in status["processes"]) else 1
        else:
            problem = health(args.url, args.min_alive_workers)
            print(problem or "healthy")
            return 1 if problem else 0
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
