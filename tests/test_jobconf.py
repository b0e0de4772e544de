"""TOML job defaults (sodm_spark.jobconf): the file's values, flags over them, a typo refused,
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
