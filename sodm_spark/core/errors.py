"""How a job fails: every failure has a kind, every kind one exit code, and the console gets one
line, ``error: what, where, what to do``.

=============  =========  ===================================================================
kind           exit code  what
=============  =========  ===================================================================
``settings``   2          a flag or the job config, an output path that cannot be written,
                          settings the data cannot satisfy (more levels than rows)
``internal``   4          anything the checks did not foresee: a bug, or Spark failing itself
``input``      5          the data or a model: a missing path, a malformed line, NaN, one
                          class, a feature count that differs
``resources``  6          memory or disk: a budget below what a partition needs, a task out
                          of memory
=============  =========  ===================================================================

An error is raised as what it is: a plain ValueError only where a pure function checks its
own arguments; where a setting, the data or a resource enters (the Spark layer, the jobs, data
readers and storage, ``ops/``, a function that reads a model or checkpoint file), a
:class:`SettingsError`, :class:`InputError` or :class:`ResourceError`.

Codes 1 and 3 are ``jobs/retrain.py``'s outcomes (production model kept; another retrain holds
the lock); 2 is also argparse's code for a flag it refuses.

A check that fires inside a Spark task reaches the driver only as text: the task's Python
traceback inside a Java error (``Py4JJavaError`` from RDD actions, ``PythonException`` from
DataFrame ones), among Spark's own stack traces. A task function wrapped with
:func:`reported_to_driver` raises :class:`TaskFailure`, whose message carries its kind between
markers; :func:`failure_of` finds the first marked message in that text, so no job searches
tracebacks for exception names. Spark's logging of the failed tasks goes to the log file
(``conf/log4j2.properties``), and so does the full trace of an internal error
(:func:`write_trace`), so the console keeps the one line.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

SETTINGS, INTERNAL, INPUT, RESOURCES = "settings", "internal", "input", "resources"
EXIT_CODES = {SETTINGS: 2, INTERNAL: 4, INPUT: 5, RESOURCES: 6}

#: Where Spark's task-failure logs and the traces of internal errors go: $SODM_LOG_FILE, else
#: this path below the working directory (conf/log4j2.properties names the same file).
DEFAULT_LOG_FILE = "logs/sodm-spark.log"

_MARKED = re.compile(r'<sodm-error kind="(\w+)">(.*?)</sodm-error>', re.S)
# Failures that Spark reports in Java text only (no Python exception to mark): running out of
# memory or disk is a resource problem whatever the task was doing.
_RESOURCE_TEXT = re.compile(r"java\.lang\.OutOfMemoryError[^\n]*|No space left on device"
                            r"|^MemoryError\b[^\n]*", re.M)
# ... and a file Spark's own readers cannot read (a damaged Parquet file, say) is bad input
_UNREADABLE_FILE = re.compile(r"\[FAILED_READ_FILE[\w.]*\] ([^\n]*)")
# A Python worker that could not import a module (the line ending its traceback)
_MISSING_IN_WORKER = re.compile(r"^ModuleNotFoundError: No module named '([\w.]+)'")
#: Where to read how the executors get the package (the message of a worker that lacks it)
CLUSTER_DOC = "docs/cluster.md"
# The attribute an unknown failure carries its full trace in (:func:`reported`), set on
# exceptions of any type, so it is named once here rather than declared on a class
_TRACE = "sodm_trace"


class JobError(Exception):
    """A failure whose kind is known where it is raised."""

    kind = INTERNAL


class SettingsError(JobError, ValueError):
    """Settings that cannot work: a flag's value, or settings the data cannot satisfy."""

    kind = SETTINGS


class InputError(JobError, ValueError):
    """The data or a model cannot be used as they are."""

    kind = INPUT


class ResourceError(JobError, ValueError):
    """The work needs more memory or disk than the job may use."""

    kind = RESOURCES


@contextmanager
def refused_as_settings() -> Iterator[None]:
    """A plain ValueError inside the block (a pure check's, such as
    :func:`~sodm_spark.core.validation.check_odm_params`) leaves as a :class:`SettingsError`
    with the same message; an error that already has a kind passes unchanged. Where a settings
    record checks its fields: ``@refused_as_settings()`` on its ``__post_init__``."""
    try:
        yield
    except JobError:
        raise
    except ValueError as error:
        raise SettingsError(str(error)) from error


class ExecutorsLackPackage(SettingsError):
    """The executors' Python cannot import sodm_spark or a module its tasks need: their
    interpreter is not the one the package is installed in."""


class TaskFailure(JobError):
    """A failure inside a Spark task; its text carries the kind and message between markers
    that :func:`failure_of` finds again in the Java error the driver receives."""

    def __init__(self, kind: str, message: str):
        super().__init__(f'<sodm-error kind="{kind}">{message}</sodm-error>')
        self.kind, self.message = kind, message


def one_line(text: object) -> str:
    """``text`` with its line breaks (and runs of blanks) folded to single spaces."""
    return " ".join(str(text).split())


def _kind_in_task(error: BaseException, value_errors: str | None) -> str | None:
    if isinstance(error, JobError):
        return error.kind
    if isinstance(error, MemoryError):
        return RESOURCES
    if isinstance(error, ValueError):
        return value_errors
    return None


def reported_to_driver(func: Callable[..., Any] | None = None, *,
                       value_errors: str | None = INPUT) -> Callable[..., Any]:
    """Decorate a Spark task function (a ``map`` function or a ``mapPartitions`` /
    ``mapInArrow`` one returning an iterator) so that a check failing inside it reaches the
    driver as a :class:`TaskFailure`: its own kind for a :class:`JobError`, ``value_errors``
    for another ValueError (the task's checks of rows), resources for a MemoryError. Other
    errors pass unchanged: they are internal."""
    if func is None:
        return functools.partial(reported_to_driver, value_errors=value_errors)

    def marked(error: Exception) -> Exception:
        kind = _kind_in_task(error, value_errors)
        if kind is None or isinstance(error, TaskFailure):
            return error
        return TaskFailure(kind, str(error) or type(error).__name__)

    def marked_iteration(iterator: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from iterator
        except Exception as error:
            failure = marked(error)
            if failure is error:
                raise
            raise failure from error

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            result = func(*args, **kwargs)
        except Exception as error:
            failure = marked(error)
            if failure is error:
                raise
            raise failure from error
        return marked_iteration(result) if isinstance(result, Iterator) else result

    return run


def _chain(error: BaseException | None) -> Iterator[BaseException]:
    """``error`` and the exceptions it was raised from or during, outermost first."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _text(error: BaseException) -> str:
    """``str(error)``; a Py4J error asks the JVM for it, which fails once the JVM is gone."""
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - the JVM behind a Py4J error may have stopped
        return ""


def executors_python(python: str | None = None, connect: bool = False) -> str:
    """The Python the executors run, in words: ``python`` (a SparkContext's ``pythonExec``;
    None: this process's ``PYSPARK_PYTHON``), else ``python3`` from their PATH; on Spark
    Connect (``connect``) the server's, which this process cannot see."""
    if connect:
        return "the Spark Connect server's Python (its spark.pyspark.python, PYSPARK_PYTHON)"
    python = python or os.environ.get("PYSPARK_PYTHON")
    if python in (None, "python3") and not os.environ.get("PYSPARK_PYTHON"):
        return "python3 from the executors' PATH (PYSPARK_PYTHON is not set)"
    return f"{python} (PYSPARK_PYTHON, spark.pyspark.python)"


def executors_cannot_import(error: BaseException, python: str | None = None) -> str | None:
    """The one line for a Spark error whose Python worker could not import a module (no
    ``PYSPARK_PYTHON``, workers without the package), naming the module, the executors'
    Python (:func:`executors_python`) and the remedies; None for any other error. Read from
    the worker's traceback in the error's text: nothing of Spark is imported."""
    for link in _chain(error):
        missing = None if isinstance(link, ImportError) else \
            _MISSING_IN_WORKER.match(_raised_in_python(_text(link)) or "")  # not the driver's
        if missing is None:
            continue
        connect = type(link).__module__.startswith("pyspark.errors.exceptions.connect")
        remedy = ("Install sodm-spark where the server's executors run, or point the server's "
                  "PYSPARK_PYTHON at a Python that has it" if connect else
                  "Point PYSPARK_PYTHON (spark.pyspark.python) at a Python that has sodm-spark "
                  "installed, install sodm-spark on every worker, or ship it with the job: "
                  "spark-submit --archives with a packed environment, or --py-files with the "
                  "package")
        return (f"the executors' Python cannot import {missing.group(1)} (No module named "
                f"'{missing.group(1)}'), which sodm_spark's Spark tasks need: they run "
                f"{executors_python(python, connect)}. {remedy} ({CLUSTER_DOC}).")
    return None


@contextmanager
def executors_checked(python: str | None = None) -> Iterator[None]:
    """What the estimators fit in: a Spark error of workers that cannot import a module leaves
    the block as an :class:`ExecutorsLackPackage` of one line (:func:`executors_cannot_import`),
    the workers' traces on its ``__context__``, not in its text; any other passes unchanged."""
    try:
        yield
    except ExecutorsLackPackage:
        raise
    except Exception as error:
        message = executors_cannot_import(error, python)
        if message is None:
            raise
        raise ExecutorsLackPackage(message) from None


def failure_of(error: BaseException,
               value_errors: str | None = INPUT) -> tuple[str, str] | None:
    """``(kind, message)`` of a failure the checks know, or None (an internal error).

    Known are: a :class:`JobError` anywhere in the exception chain; a marked task failure in
    the text of a Spark error; Python workers that cannot import the package (settings,
    :func:`executors_cannot_import`); running out of memory or disk; a missing file (input);
    and any other ValueError as ``value_errors`` (None: not known)."""
    chain = list(_chain(error))
    for link in chain:
        if isinstance(link, JobError) and not isinstance(link, TaskFailure):
            return link.kind, str(link)
    cannot_import = executors_cannot_import(error)
    if cannot_import is not None:
        return SETTINGS, cannot_import
    for link in chain:
        if isinstance(link, TaskFailure):
            return link.kind, link.message
        text = _text(link)
        marked = _MARKED.search(text)
        if marked:
            return marked.group(1), marked.group(2)
        unreadable = _UNREADABLE_FILE.search(text)
        if unreadable:
            return INPUT, (f"Spark could not read the input: {unreadable.group(1).strip()} "
                           "Remove or replace that file.")
        resource = _RESOURCE_TEXT.search(text)
        if resource or isinstance(link, MemoryError):
            cause = resource.group(0) if resource else f"MemoryError: {text}"
            return RESOURCES, (f"the job ran out of memory or disk ({cause.strip()}); give it "
                               "more (spark.driver.memory, spark.executor.memory, memory_mb / "
                               "--memory-mb, spark.local.dir) or start from more, smaller "
                               "partitions (larger levels, --levels).")
    for link in chain:
        if isinstance(link, FileNotFoundError):
            return INPUT, str(link)
        if isinstance(link, ValueError) and value_errors is not None:
            return value_errors, str(link)
    return None


class JobExit(SystemExit):
    """The end of a job that failed for a known reason: ``code`` is the one-line message (as a
    plain ``SystemExit("error: ...")`` would print it), ``status`` the exit code of its
    kind, which :func:`run_job` returns."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"error: {one_line(message)}")
        self.kind, self.status = kind, EXIT_CODES[kind]


@contextmanager
def reported(value_errors: str | None = INPUT, prefix: str = "") -> Iterator[None]:
    """Turn a known failure inside the block into a :class:`JobExit` (``prefix`` before its
    message); a ValueError counts as ``value_errors``. An unknown one passes unchanged, its
    full trace kept on it while the JVM that can explain a Py4J error still runs."""
    try:
        yield
    except JobExit:
        raise
    except Exception as error:
        found = failure_of(error, value_errors)
        if found is None:
            try:
                setattr(error, _TRACE, full_trace(error))
            except AttributeError:  # an exception type that takes no attributes
                pass
            raise
        kind, message = found
        raise JobExit(kind, prefix + message) from error


def full_trace(error: BaseException) -> str:
    """The whole traceback of ``error``, its causes and, for a Spark error, the Java stack."""
    try:
        return "".join(traceback.format_exception(error))
    except Exception:  # noqa: BLE001 - a Py4J error whose JVM has stopped
        return "".join(traceback.format_tb(error.__traceback__)) + repr(error) + "\n"


def log_file() -> Path:
    """The log file of the jobs (see :data:`DEFAULT_LOG_FILE`), as an absolute path."""
    return Path(os.environ.get("SODM_LOG_FILE") or DEFAULT_LOG_FILE).absolute()


def write_trace(error: BaseException, argv: Iterable[object]) -> Path | None:
    """Append the full trace of ``error`` to :func:`log_file`; its path, or None when it
    cannot be written."""
    path = log_file()
    text = getattr(error, _TRACE, None) or full_trace(error)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(f"{time.strftime('%y/%m/%d %H:%M:%S')} sodm-spark job failed: "
                         f"{' '.join(map(str, argv))}\n{text}\n")
    except OSError:
        return None
    return path


def error_text(exc: BaseException, limit: int = 300) -> str:
    """The most telling line of a Spark/py4j error: the root Java cause when there is one (read
    from the error's ``java_exception``; nothing of Spark is imported)."""
    java = getattr(exc, "java_exception", None)
    # the JVM object may be gone or not what we think: then the Python text says it
    with suppress(Exception):
        while java is not None and java.getCause() is not None:
            java = java.getCause()
        if java is not None:
            return str(java.toString()).strip()[:limit]
    lines = [t.strip() for t in str(exc).strip().splitlines() if t.strip()]
    return (lines[0] if lines else type(exc).__name__)[:limit]


def _raised_in_python(text: str) -> str | None:
    """The ``Type: message`` line that ends the first Python traceback in ``text`` (a Spark
    error carries its task's traceback), or None."""
    start = text.find("Traceback (most recent call last):")
    if start < 0:
        return None
    for line in text[start:].splitlines()[1:]:
        if line.strip() and not line[0].isspace():
            return line.strip()
    return None


def _summary(error: BaseException) -> str:
    """``Type: first line`` of ``error``; for a Spark error, the Python error of its task or
    else its root Java cause (never a stack trace)."""
    text = _text(error)
    in_task = _raised_in_python(text)
    if in_task is not None:
        return f"{in_task[:300]}, in a Spark task"
    if getattr(error, "java_exception", None) is not None:
        return one_line(error_text(error))
    lines = text.strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def describe_failure(error: BaseException, argv: Iterable[object],
                     value_errors: str | None = None) -> tuple[str, str]:
    """``(kind, one-line message)`` of any failure: a known one's (:func:`failure_of`), else
    an internal error whose trace is written to :func:`log_file`, the message saying where."""
    if isinstance(error, JobExit):
        return error.kind, str(error.code).removeprefix("error: ")  # code: the line, a str
    found = failure_of(error, value_errors)
    if found is not None:
        return found[0], one_line(found[1])
    path = write_trace(error, argv)
    where = (f"the full trace is in {path}" if path is not None else
             f"the trace could not be written to {log_file()}; rerun with --verbose")
    return INTERNAL, (f"an unexpected failure stopped the job ({_summary(error)}): a bug or "
                      f"Spark itself, not a check of your flags or data; {where}")


def run_job(main: Callable[..., int | None], argv: Iterable[str] | None = None) -> int:
    """Run a job's ``main(argv)`` and return its exit code: the kind's code and one
    ``error: ...`` line on stderr for a failure (with ``--verbose``, the full trace before it).
    An internal error's trace is written to :func:`log_file` and the line says where."""
    args = sys.argv[1:] if argv is None else list(argv)
    error: BaseException
    try:
        status = main() if argv is None else main(argv)
    except (SystemExit, KeyboardInterrupt) as stop:
        if not isinstance(stop, JobExit):
            raise
        error = stop
    except Exception as unexpected:  # noqa: BLE001 - every failure ends as one line and a code
        error = unexpected
    else:
        return 0 if status is None else int(status)
    if "--verbose" in args:
        cause = error.__cause__ if isinstance(error, JobExit) else error
        if cause is not None:
            print(getattr(cause, _TRACE, None) or full_trace(cause), file=sys.stderr)
    kind, message = describe_failure(error, [Path(sys.argv[0]).name, *args])
    print(f"error: {message}", file=sys.stderr, flush=True)
    return EXIT_CODES[kind]
