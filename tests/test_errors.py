"""How a job fails (sodm_spark.core.errors): kinds and exit codes, errors marked inside real Spark
tasks and found again on the driver, one line on the console, the trace of an unexpected
failure in the log file. The jobs' own bad-input matrix is in test_bad_inputs.py."""
import re

import pytest

from sodm_spark.core.errors import (EXIT_CODES, INPUT, INTERNAL, RESOURCES, SETTINGS, InputError,
                                    JobExit, SettingsError, failure_of, reported,
                                    reported_to_driver, run_job)


def test_every_kind_has_its_own_code_apart_from_retrains_outcomes():
    assert EXIT_CODES == {SETTINGS: 2, INTERNAL: 4, INPUT: 5, RESOURCES: 6}
    assert not {0, 1, 3} & set(EXIT_CODES.values())  # success, retrain's kept and locked


# Task functions are made inside functions: Spark then ships them by value (the workers cannot
# import this test module).

def refuse_row():
    def refuse(iterator):
        for x in iterator:
            if x == 3:
                raise ValueError(f"row {x} has a NaN; fill or drop it")
            yield x
    return reported_to_driver(refuse)


def refuse_settings():
    def refuse(x):
        raise SettingsError("--levels 9 asks for more partitions than rows")
    return reported_to_driver(refuse)


def run_out_of_memory():
    def allocate(iterator):
        raise MemoryError("Unable to allocate 3.00 TiB for an array")
        yield
    return reported_to_driver(allocate)


@pytest.mark.parametrize("task, kind, message", [
    (lambda rdd: rdd.mapPartitions(refuse_row()), INPUT, "row 3 has a NaN; fill or drop it"),
    (lambda rdd: rdd.map(refuse_settings()), SETTINGS,
     "--levels 9 asks for more partitions than rows"),
    (lambda rdd: rdd.mapPartitions(run_out_of_memory()), RESOURCES,
     "Unable to allocate 3.00 TiB for an array"),
], ids=["ValueError", "SettingsError", "MemoryError"])
def test_a_check_in_a_spark_task_reaches_the_driver_with_its_kind_and_message(spark, task, kind,
                                                                               message):
    rdd = spark.sparkContext.parallelize(range(6), 2)
    with pytest.raises(JobExit) as stop:
        with reported(prefix="--data x: "):
            task(rdd).collect()
    # Py4JJavaError (pyspark 4.0, 4.1): a Java error around the task's trace; from pyspark 4.2
    # a PythonException, the task's trace alone
    spark_error = stop.value.__cause__
    assert "Traceback" in str(spark_error)
    if type(spark_error).__name__ == "Py4JJavaError":
        assert "\tat org.apache.spark" in str(spark_error)
    assert failure_of(spark_error) == (kind, message)
    assert stop.value.code == f"error: --data x: {message}"
    assert stop.value.status == EXIT_CODES[kind]
    # (DataFrame tasks fail as PythonException: the job matrix scores a Parquet row with NaN)


def test_an_unmarked_failure_in_a_task_is_internal_one_line_and_the_trace_goes_to_the_log(
        spark, tmp_path, monkeypatch, capsys):
    log = tmp_path / "logs" / "jobs.log"
    monkeypatch.setenv("SODM_LOG_FILE", str(log))

    def main(argv):
        def divide_by_zero(x):
            return 1 / 0

        with reported():
            spark.sparkContext.parallelize([1, 2], 2).map(divide_by_zero).collect()

    assert run_job(main, ["--data", "x"]) == EXIT_CODES[INTERNAL]
    console = capsys.readouterr()
    lines = (console.out + console.err).strip().splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(r"error: an unexpected failure stopped the job \(ZeroDivisionError: "
                        r"division by zero, in a Spark task\): a bug or Spark itself, not a "
                        rf"check of your flags or data; the full trace is in {re.escape(str(log))}",
                        lines[0]), lines[0]
    trace = log.read_text()
    assert "--data x" in trace and "in divide_by_zero" in trace  # the task's Python trace
    if "Py4JJavaError" in trace:  # and the Java stack, where the error carries one
        assert re.search(r"\tat org\.apache\.spark\.", trace)


def test_verbose_prints_the_trace_before_the_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SODM_LOG_FILE", str(tmp_path / "jobs.log"))

    def main(argv):
        with reported():
            raise InputError("--data x (format 'libsvm') does not exist. Check the path.")

    assert run_job(main, []) == EXIT_CODES[INPUT]
    assert capsys.readouterr().err == ("error: --data x (format 'libsvm') does not exist. "
                                       "Check the path.\n")
    assert run_job(main, ["--verbose"]) == EXIT_CODES[INPUT]
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "in main" in err
    assert err.splitlines()[-1].startswith("error: --data x (format 'libsvm') does not exist")
    assert not (tmp_path / "jobs.log").exists()  # a known failure needs no trace file


@pytest.mark.parametrize("error, value_errors, found", [
    (FileNotFoundError("no snapshot"), None, (INPUT, "no snapshot")),
    (ValueError("bad --lam"), SETTINGS, (SETTINGS, "bad --lam")),
    (ValueError("a bug?"), None, None),
    (RuntimeError("java.lang.OutOfMemoryError: Java heap space"), None, RESOURCES),
    (KeyError("x"), INPUT, None),
], ids=["missing-file", "value-error-as-settings", "value-error-unknown", "java-oom", "bug"])
def test_what_counts_as_which_kind(error, value_errors, found):
    result = failure_of(error, value_errors)
    if isinstance(found, str):
        assert result[0] == found and "ran out of memory" in result[1]
    else:
        assert result == found


def test_a_damaged_parquet_file_is_bad_input_naming_the_file(spark, tmp_path):
    folder = tmp_path / "table"
    folder.mkdir()
    (folder / "part-0.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 8 + b"PAR1")
    with pytest.raises(Exception) as raised:
        spark.read.parquet(str(folder)).collect()
    kind, message = failure_of(raised.value)
    assert kind == INPUT and "part-0.parquet" in message and "Remove or replace" in message


def test_a_failure_raised_while_handling_another_keeps_its_own_kind():
    try:
        try:
            raise KeyError("lookup")
        except KeyError:
            raise SettingsError("--p 1: p must be >= 2") from None
    except SettingsError as error:
        assert failure_of(error) == (SETTINGS, "--p 1: p must be >= 2")
