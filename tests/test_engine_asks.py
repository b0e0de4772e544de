"""One place chooses the back end, nothing else asks (docs/design.md §6.0).

``sodm_spark/spark/engine.py`` chooses the engine (``context_of``) and answers every question
whose answer differs between classic Spark, Spark Connect and the in-process back end, as a
capability named for what it gives (``has_accumulators``, ``distributes_files``,
``executor_count``, ``persisted_rdds``, ``reads_text_lines``, ``driver_jvm``, ``driver_hadoop``,
``server_client``, ``job_tags``). The first test reads the source (no Spark) and fails, naming
file and line, where any other module asks which back end it runs on: calls or imports of the
engine's private questions (``is_connect``, ``uses_frames``, ``is_in_process``, with or without
their leading underscore), the JVM's handles (``._jsc``, ``._jvm``, also through ``getattr`` or
``hasattr``), or ``isinstance`` against a context's class. No other module is excused: the
back ends' own modules (``frames.py``, ``frame_rdd.py``, ``in_process.py``) implement the RDD
subset without asking which back end they are, and the Connect server's machinery
(``connect.py``, ``session.py``) reaches its client through ``server_client``. The other tests
check each capability's answers against the engine itself: in process (no JVM), on the
session-scoped classic session, and over DataFrames (a FrameContext over that session); the
Spark Connect client's answers are checked inside tests/connect_client.py, on the server
tests/test_spark_connect.py already runs.
"""
import ast
from pathlib import Path

import pytest

from sodm_spark.spark import engine

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for folder in ("sodm_spark", "jobs", "benchmarks")
                 for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)
#: The one module that may ask which back end it runs on.
CHOOSER = ROOT / "sodm_spark" / "spark" / "engine.py"
QUESTIONS = frozenset({"is_connect", "uses_frames", "is_in_process"})
JVM_HANDLES = frozenset({"_jsc", "_jvm"})
CONTEXT_CLASSES = frozenset({"SparkContext", "FrameContext", "InProcessContext"})


def _name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def back_end_asks(source: str) -> list[tuple[int, str]]:
    """(line, what) of every place ``source`` asks which back end it runs on."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"imports {alias.name}") for alias in node.names
                      if alias.name.lstrip("_") in QUESTIONS]
        elif isinstance(node, (ast.Name, ast.Attribute)) and _name(node) is not None \
                and str(_name(node)).lstrip("_") in QUESTIONS:
            found.append((node.lineno, f"asks {_name(node)}"))
        elif isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in QUESTIONS:
            found.append((node.lineno, f"defines {node.name}"))
        elif isinstance(node, ast.Attribute) and node.attr in JVM_HANDLES:
            found.append((node.lineno, f"reaches .{node.attr}"))
        elif isinstance(node, ast.Call) and _name(node.func) in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in JVM_HANDLES:
            found.append((node.lineno, f"{_name(node.func)}(..., {node.args[1].value!r})"))
        elif isinstance(node, ast.Call) and _name(node.func) == "isinstance" \
                and len(node.args) == 2:
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) \
                else [node.args[1]]
            found += [(node.lineno, f"isinstance(..., {_name(c)})") for c in classes
                      if _name(c) in CONTEXT_CLASSES]
    return sorted(set(found))


def test_no_module_but_the_engine_asks_which_back_end_it_runs_on():
    asks = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in SOURCES if path != CHOOSER
            for line, what in back_end_asks(path.read_text())]
    assert not asks, "ask the capability in sodm_spark/spark/engine.py instead:\n" + \
        "\n".join(asks)


def test_the_check_finds_each_way_of_asking():
    """What the check above reads as asking (each line is one way main asked before)."""
    asked = back_end_asks("\n".join([
        "from ..engine import context_of, is_connect",
        "if not is_connect(spark): pass",
        "connect = uses_frames(sc)",
        "executors = sc._jsc.sc().getExecutorMemoryStatus()",
        "jvm = spark.sparkContext._jvm",
        "if getattr(sc, '_jsc', None) is None: pass",
        "ok = isinstance(sc, (int, FrameContext))",
        "engine._is_in_process(sc)",
        "def is_in_process(sc): return True",
        "x = self._jvm_free  # a name that only begins like one is no question",
    ]))
    assert [line for line, _ in asked] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert back_end_asks(CHOOSER.read_text())  # the engine itself asks: the check can fail


def test_in_process_answers_without_a_jvm(monkeypatch):
    from pyspark import SparkContext

    sc = engine.context_of(None, cores=2)
    assert engine.has_accumulators(sc)
    counted = sc.accumulator(0)
    assert sc.parallelize(range(10), 2).map(lambda x: counted.add(x) or x).count() == 10
    assert counted.value == sum(range(10))
    assert not engine.distributes_files(sc) and not hasattr(sc, "addFile")
    assert engine.executor_count(sc) is None
    assert sc.parallelize(range(4), 2).persist(engine.PERSIST).is_cached  # kept, yet listed
    assert dict(engine.persisted_rdds(sc)) == {}  # nowhere: it goes with its records
    # no SparkContext running in this process: no JVM, no Hadoop for the driver
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    assert engine.driver_jvm() is None and engine.driver_hadoop() is None


def test_classic_and_dataframe_answers_on_the_session(spark, tmp_path):
    sc = spark.sparkContext
    assert engine.context_of(spark) is sc
    assert engine.has_accumulators(sc) and engine.distributes_files(sc)
    # the executors less the driver, as Spark's status tracker lists them (local: none)
    infos = sc._jsc.sc().statusTracker().getExecutorInfos()
    assert engine.executor_count(sc) == len(infos) - 1
    kept = sc.parallelize(range(4), 2).persist(engine.PERSIST)
    kept.count()
    assert kept.id() in engine.persisted_rdds(sc)
    kept.unpersist(blocking=True)
    assert kept.id() not in engine.persisted_rdds(sc)

    assert engine.reads_text_lines(spark) and engine.server_client(spark) is None
    assert engine.driver_jvm(spark) is sc._jvm and engine.driver_jvm() is sc._jvm
    hadoop = engine.driver_hadoop(spark)
    assert hadoop is not None and hadoop.jvm is sc._jvm
    assert hadoop.configuration.get("fs.defaultFS") == \
        sc._jsc.hadoopConfiguration().get("fs.defaultFS")
    (tmp_path / "here").write_text("x")
    where = hadoop.path(tmp_path / "here")
    assert where.getFileSystem(hadoop.configuration).getFileStatus(where).getLen() == 1
    assert engine.job_tags(spark) == (sc.addJobTag, sc.removeJobTag, sc.cancelJobsWithTag)

    from sodm_spark.spark.frames import FrameContext

    frames = FrameContext(spark)  # records over DataFrames, as on Spark Connect
    assert not engine.has_accumulators(frames) and not engine.distributes_files(frames)
    assert engine.executor_count(frames) is None and dict(engine.persisted_rdds(frames)) == {}


@pytest.mark.parametrize("records", ["rdd", "frames"])
def test_context_of_chooses_by_the_session_and_the_records_setting(spark, monkeypatch, records):
    from sodm_spark.spark.frames import FrameContext

    monkeypatch.setenv(engine.RECORDS_ENV, records)
    chosen = engine.context_of(spark)
    assert isinstance(chosen, FrameContext) == (records == "frames")
    # the session's own capabilities do not follow the records: they are the session's
    assert engine.reads_text_lines(spark) and engine.driver_hadoop(spark) is not None
