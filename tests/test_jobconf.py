"""TOML job defaults (sodm_spark.ops.jobconf): the file's values, flags over them, a typo refused,
and the ``config:`` line a training job prints."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import train_sodm  # noqa: E402


def _config(tmp_path, text):
    path = tmp_path / "jobs.toml"
    path.write_text(text)
    return path


def test_the_file_sets_defaults_and_flags_override_them(tmp_path):
    path = _config(tmp_path, "[common]\nseed = 7\nunused-by-train = 1\n\n[train_sodm]\n"
                             "levels = 4\nstop-level = 1\nlam = 250.0\n")
    args = train_sodm.parse_args(["--config", str(path)])
    assert (args.levels, args.stop_level, args.lam, args.seed) == (4, 1, 250.0, 7)
    assert args.config == path
    args = train_sodm.parse_args(["--config", str(path), "--levels", "2", "--seed", "9"])
    assert (args.levels, args.stop_level, args.lam, args.seed) == (2, 1, 250.0, 9)


def test_the_environment_variable_names_the_file(tmp_path, monkeypatch):
    path = _config(tmp_path, "[train_sodm]\np = 5\n")
    monkeypatch.setenv("SODM_JOBS_CONF", str(path))
    assert train_sodm.parse_args([]).p == 5


def test_without_a_file_named_the_repository_conf_is_read_from_any_directory(tmp_path,
                                                                            monkeypatch):
    from sodm_spark.ops.jobconf import find_config

    monkeypatch.delenv("SODM_JOBS_CONF", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert find_config() == ROOT / "conf" / "sodm-jobs.toml"
    # and its values reach the job: the benchmark's table sets lam = 1000, which no default does
    import benchmark

    assert benchmark.parse_args([]).lam == 1000.0


def test_an_unknown_key_in_the_jobs_table_is_refused_naming_file_and_key(tmp_path):
    path = _config(tmp_path, "[train_sodm]\nlevles = 4\n")
    with pytest.raises(SystemExit, match=r"jobs.toml sets levles for \[train_sodm\], which "
                                         "train_sodm does not take"):
        train_sodm.parse_args(["--config", str(path)])
    with pytest.raises(SystemExit, match="no such file"):
        train_sodm.parse_args(["--config", str(tmp_path / "missing.toml")])
    broken = _config(tmp_path, "[train_sodm\n")
    with pytest.raises(SystemExit, match="is unreadable"):
        train_sodm.parse_args(["--config", str(broken)])


def test_the_training_job_prints_the_config_it_ran_with(spark, tmp_path, capsys):
    path = _config(tmp_path, "[train_sodm]\nlevels = 1\np = 2\nstrata = 3\nlam = 100.0\n")
    assert train_sodm.main(["--config", str(path), "--rows", "400", "--lam", "50",
                            "--model-out", str(tmp_path / "model")]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("config: "))
    config = json.loads(line.removeprefix("config: "))
    assert (config["levels"], config["p"], config["strata"], config["lam"]) == (1, 2, 3, 50.0)
    assert config["config"] == str(path)


def test_outputs_that_could_not_be_written_are_refused_before_the_work(tmp_path):
    from sodm_spark.ops.jobconf import check_output_paths

    existing = tmp_path / "taken"
    existing.write_text("keep me")
    folder = tmp_path / "folder"
    folder.mkdir()
    check_output_paths({"--model-out": str(tmp_path / "new" / "model")},
                       {"--metrics-out": str(tmp_path / "m.json")})  # both can be written
    check_output_paths({"--model-out": str(folder)}, {"--metrics-out": str(existing)})
    check_output_paths({"--model-out": "hdfs://nn/models/m"}, {"--metrics-out": None})
    with pytest.raises(ValueError, match=r"--model-out .*taken is a file; .*directory"):
        check_output_paths({"--model-out": str(existing)}, {})
    with pytest.raises(ValueError, match=r"--metrics-out .*folder is a directory"):
        check_output_paths({}, {"--metrics-out": str(folder)})
    check_output_paths({}, {"--metrics-out": str(tmp_path / "new" / "m.json")})  # created
    with pytest.raises(ValueError, match=r"--metrics-out .*taken/m.json cannot be written"):
        check_output_paths({}, {"--metrics-out": str(existing / "m.json")})
    with pytest.raises(ValueError, match=r"--checkpoint-dir .*taken/ck cannot be written"):
        check_output_paths({"--checkpoint-dir": str(existing / "ck")}, {})
    assert existing.read_text() == "keep me"


@pytest.mark.parametrize("flag", ["--model-out", "--checkpoint-dir"])
def test_the_training_job_refuses_an_existing_file_as_its_directory_before_reading(
        tmp_path, flag, capsys):
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    # the data do not exist: a job that read them first would name them instead
    with pytest.raises(SystemExit) as stop:
        train_sodm.main(["--data", str(tmp_path / "missing.libsvm"), flag, str(taken)])
    assert str(stop.value).startswith(f"error: {flag} {taken} is a file;")
    assert taken.read_text() == "keep me"
