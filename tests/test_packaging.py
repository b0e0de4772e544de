"""The package as a wheel installs it (docs/cluster.md): the jobs as console commands, the
configuration the repository keeps in conf/ as package data, and both found from any working
directory without the repository.

The wheel test builds the wheel from a copy of the package (pip, with build isolation: it needs
setuptools from the package index or pip's cache, and is skipped where neither answers),
installs it with ``--no-deps`` into a folder of its own and runs its commands from another
directory with that folder first on the path, so that the repository's editable install cannot
answer for it. A full default ``sodm-train`` run is not part of it (minutes, not seconds).
"""
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from sodm_spark.ops import jobconf

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ROOT / "sodm_spark" / jobconf.PACKAGED_CONF_DIR
CONF_FILES = ("spark-defaults.conf", "log4j2.properties", "sodm-jobs.toml")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
COMMANDS = {"sodm-train": "train_sodm", "sodm-tune": "tune", "sodm-predict": "predict",
            "sodm-retrain": "retrain", "sodm-benchmark": "benchmark",
            "sodm-train-baseline": "train_baseline", "sodm-export-onnx": "export_onnx"}


@pytest.mark.parametrize("name", CONF_FILES)
def test_the_packaged_conf_is_the_repository_conf(name):
    """One content in two places: conf/ for SPARK_CONF_DIR=conf in a checkout, the package's
    copy for an installed wheel. Edit conf/, then copy the file over."""
    assert (PACKAGED / name).read_bytes() == (ROOT / "conf" / name).read_bytes(), \
        f"cp conf/{name} sodm_spark/{jobconf.PACKAGED_CONF_DIR}/{name}"


def test_pyproject_declares_the_commands_and_ships_the_conf():
    scripts = PYPROJECT["project"]["scripts"]
    assert scripts == {command: f"sodm_spark.jobs.{module}:command"
                       for command, module in COMMANDS.items()}
    for module in COMMANDS.values():  # each has its command, its main and its own file
        text = (ROOT / "sodm_spark" / "jobs" / f"{module}.py").read_text()
        assert "\ndef command() -> int:" in text and "\ndef main(" in text
        assert 'if __name__ == "__main__":' in text
        shim = ROOT / "jobs" / f"{module}.py"
        assert len(shim.read_text().splitlines()) <= 12, f"{shim.name} is no longer a thin file"
        assert f"from sodm_spark.jobs.{module} import" in shim.read_text()
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["sodm_spark"]
    shipped = {p.name for pattern in globs for p in (ROOT / "sodm_spark").glob(pattern)}
    assert set(CONF_FILES) <= shipped


def test_without_the_repository_the_packaged_job_defaults_are_read(tmp_path, monkeypatch):
    for name in ("SODM_JOBS_CONF", "SPARK_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jobconf, "REPO_CONF", tmp_path / "no-checkout" / jobconf.CONF_NAME)
    found = jobconf.find_config()
    assert Path(str(found)) == PACKAGED / jobconf.CONF_NAME
    from sodm_spark.jobs import benchmark

    assert benchmark.parse_args([]).lam == 1000.0  # the [benchmark] table, no default says so


def test_a_command_without_spark_configuration_points_spark_at_the_packaged_one(tmp_path):
    spark_home = tmp_path / "spark"
    (spark_home / "conf").mkdir(parents=True)
    environ = {"SPARK_HOME": str(spark_home)}
    assert jobconf.use_packaged_spark_conf(environ) == str(PACKAGED)
    assert environ["SPARK_CONF_DIR"] == str(PACKAGED)
    defaults = dict(line.split(None, 1) for line in
                    (PACKAGED / "spark-defaults.conf").read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
    assert defaults["spark.driver.memory"] == "4g"
    # a Spark configuration of the user's, or spark-submit's JVM already up: left as they are
    (spark_home / "conf" / "spark-defaults.conf").write_text("spark.driver.memory 1g\n")
    theirs = {"SPARK_HOME": str(spark_home)}
    assert jobconf.use_packaged_spark_conf(theirs) is None and "SPARK_CONF_DIR" not in theirs
    own = {"SPARK_CONF_DIR": str(tmp_path)}
    assert jobconf.use_packaged_spark_conf(own) is None and own["SPARK_CONF_DIR"] == str(tmp_path)
    submitted = {"PYSPARK_GATEWAY_PORT": "4242", "SPARK_HOME": str(tmp_path / "bare")}
    assert jobconf.use_packaged_spark_conf(submitted) is None
    assert "SPARK_CONF_DIR" not in submitted


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(folder the wheel is installed into, the wheel): built from a copy of the package."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "sodm_spark", source / "sodm_spark",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc"))
    # the build backend of this environment (the test extra's setuptools), not one fetched from
    # the package index: a wheel that does not build is a failure here, not a skip
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(work / "dist"), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((work / "dist").glob("sodm_spark-*.whl"))
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=300)
    return target, wheel


def _run(installed, command, tmp_path, **kwargs):
    """``command`` from an empty directory, the installed folder first on the path."""
    target, _ = installed
    env = {k: v for k, v in os.environ.items()
           if k not in ("SODM_JOBS_CONF", "SPARK_CONF_DIR", "PYSPARK_GATEWAY_PORT")}
    env.update(PYTHONPATH=str(target), SODM_LOG_FILE=str(tmp_path / "jobs.log"),
               PYSPARK_PYTHON=sys.executable)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=180, **kwargs)


def test_the_wheel_declares_every_command_and_carries_the_conf(installed):
    _, wheel = installed
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names
                            if n.endswith(".dist-info/entry_points.txt"))
    for command, module in COMMANDS.items():
        assert f"{command} = sodm_spark.jobs.{module}:command" in entry_points
    assert {f"sodm_spark/{jobconf.PACKAGED_CONF_DIR}/{name}" for name in CONF_FILES} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "jobs/", "conf/", "benchmarks/"))]


def test_the_installed_commands_run_from_another_directory(installed, tmp_path):
    target, _ = installed
    probe = _run(installed, [sys.executable, "-c",
                             "import sodm_spark, sodm_spark.ops.jobconf as c; "
                             "print(sodm_spark.__file__); print(c.find_config()); "
                             "print(c.use_packaged_spark_conf({}))"], tmp_path)
    assert probe.returncode == 0, probe.stderr
    package, config, conf_dir = probe.stdout.split()
    assert Path(package).is_relative_to(target), "the repository answered, not the wheel"
    assert Path(config) == target / "sodm_spark" / jobconf.PACKAGED_CONF_DIR / jobconf.CONF_NAME
    assert Path(conf_dir) == target / "sodm_spark" / jobconf.PACKAGED_CONF_DIR
    help_text = _run(installed, [str(target / "bin" / "sodm-train"), "--help"], tmp_path)
    assert help_text.returncode == 0, help_text.stderr
    assert help_text.stdout.startswith("usage: sodm-train") and "--levels" in help_text.stdout
    refused = _run(installed, [str(target / "bin" / "sodm-predict"), "--model", "m"], tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("see sodm-predict --help"), refused.stderr
    module = _run(installed, [sys.executable, "-m", "sodm_spark.jobs.tune", "--help"], tmp_path)
    assert module.returncode == 0 and module.stdout.startswith("usage: tune.py"), module.stderr


def test_spark_submit_runs_the_installed_module_file(installed, tmp_path):
    """spark-submit takes a file: the job module's, run as a script outside its package."""
    target, _ = installed
    spark_submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    if spark_submit is None:
        pytest.skip("no spark-submit beside this Python")
    script = target / "sodm_spark" / "jobs" / "train_sodm.py"
    result = _run(installed, [spark_submit, "--master", "local[1]", str(script), "--help"],
                  tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: train_sodm.py")
