"""The package layout docs/design.md §5 and the package docstrings promise.

Read from the files, not imported (but for one test, which imports what Spark's workers import
in a fresh interpreter): the top of the package holds folders only, besides ``__init__.py`` and
the ``cluster.py`` that keeps ``python -m sodm_spark.cluster``; the folders are layers
(:data:`LAYERS`) and no import runs up a layer, nor between SODM and DSVRG inside ``spark/``;
nothing below the Spark layer imports Spark; each module named in the table of docs/design.md
§5 exists and each module is named there; modules read in one sitting (about 400 lines) or say
in their docstring why not; functions read top to bottom (about 80 lines) and take at most
10 parameters, constructors aside.
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sodm_spark"


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
FOLDERS = sorted(p for p in PACKAGE.iterdir() if p.is_dir() and any(p.rglob("*.py")))
# What sits beside the folders: the package and the `python -m sodm_spark.cluster` name of
# ops/cluster.py (docker/docker-compose.yml's health checks, the guides), and the class path
# sodm_spark.ml that Spark ML metadata saved before the layout by package names; and the
# MLflow flavor, sodm_spark.mlflow as MLflow names flavors (tests/test_mlflow.py: its imports).
TOP_LEVEL_FILES = ["__init__.py", "cluster.py", "ml.py", "mlflow.py"]

# The layers, bottom to top: a module imports its own folder and the folders of lower layers,
# never a folder of its own layer or above.
LAYERS = (("core",),
          ("solvers", "partition", "data"),
          ("models",),
          ("selection",),  # judges models: the logloss calibrates them (models/calibration.py)
          ("baselines",),
          ("spark",),
          ("estimators",),
          ("ops", "benchmarking"),
          ("jobs",))  # the command lines over everything: console commands and spark-submit files
LAYER = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
# The one import that runs up the layers, lazily: a model path with a scheme (hdfs://, s3a://)
# is reached through the running Spark session's Hadoop FileSystem, imported only when such a
# path is given.
UPWARD_EXCEPTIONS = {"data/storage.py": ("sodm_spark.spark.hadoop_store",)}

# Folders that never import Spark (docs/design.md §5): every layer below spark/. And the
# scikit-learn estimator, which sits above it.
SPARK_FREE = ("core", "solvers", "partition", "data", "models", "selection", "baselines")
SPARK_FREE_MODULES = ("estimators/sklearn.py", "estimators/probability.py")

# Inside spark/: train.py and tune.py over the two algorithms, over the shared modules.
SPARK_ENTRY = ("spark.train", "spark.tune")
SPARK_ALGORITHMS = ("spark.sodm", "spark.dsvrg")

# What Spark's Python workers import to run our tasks: never scikit-learn or pyspark.ml.
WORKER_IMPORTS = ("sodm_spark.solvers.odm_dcd", "sodm_spark.solvers.odm_multiclass",
                  "sodm_spark.solvers.svrg", "sodm_spark.partition", "sodm_spark.models.scoring",
                  "sodm_spark.models.expansion", "sodm_spark.core.kernels")
MAX_LINES = 420  # "about 400"
MAX_FUNCTION_LINES = 80
# A function taking more settings than this groups them in a record (a frozen dataclass or a
# NamedTuple); a constructor takes what its class keeps (the estimators' keywords).
MAX_PARAMETERS = 10


def _imports(path: Path):
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    package = ["sodm_spark"] + list(path.relative_to(PACKAGE).parent.parts)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            yield name
            yield from (f"{name}.{alias.name}" for alias in node.names)


def _folder(relative: str) -> str:
    return relative.split("/")[0]


def _spark_part(name: str) -> str:
    """``spark.sodm`` for sodm_spark.spark.sodm.fit (or spark/sodm/fit.py), ``spark.train``
    for spark/train.py, ``spark.io`` for spark/io/arrow.py."""
    return ".".join(name.removesuffix(".py").replace("/", ".").split(".")[:2])


DESIGN = ROOT / "docs" / "design.md"
LAYERS_HEADING = "## 5. Layers of the package"


def _what_is_here() -> str:
    """The section of docs/design.md that names every module (the README links to it)."""
    text = DESIGN.read_text()
    return text.split(LAYERS_HEADING, 1)[1].split("\n## ", 1)[0]


def test_the_top_of_the_package_holds_folders_only():
    files = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.suffix == ".py")
    assert files == TOP_LEVEL_FILES, "a module beside the folders: move it into one"
    assert {folder.name for folder in FOLDERS} == set(LAYER), \
        "every folder of sodm_spark/ is a layer of LAYERS (and docs/design.md §5)"
    for folder in {p.parent for p in MODULES}:
        assert (folder / "__init__.py").is_file(), f"{folder} is not a package"


def test_the_cluster_module_is_the_command_line_of_ops_cluster_only():
    shim = PACKAGE / "cluster.py"
    assert {name for name in _imports(shim) if name.startswith("sodm_spark")} <= {
        "sodm_spark.ops.cluster", "sodm_spark.ops.cluster.*", "sodm_spark.ops.cluster.main"}
    assert len(shim.read_text().splitlines()) <= 15


def test_design_table_names_every_module_and_only_modules_that_exist():
    section = _what_is_here()
    named = set(re.findall(r"([\w/]+\.py)\b", section))
    files = {p.name for p in MODULES} | {p.name for p in (ROOT / "jobs").glob("*.py")} \
        | {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    assert not {Path(n).name for n in named} - files, \
        "docs/design.md §5 names modules that do not exist"
    unnamed = [_relative(p) for p in MODULES
               if p.name != "__init__.py" and p.name not in {Path(n).name for n in named}]
    assert not unnamed, f"modules missing from docs/design.md §5: {unnamed}"
    for folder in sorted({p.parent for p in MODULES} - {PACKAGE}):
        assert f"{folder.name}/" in section, f"docs/design.md §5 does not name {folder.name}/"


@pytest.mark.parametrize("path", [p for p in MODULES if _folder(_relative(p)) in SPARK_FREE
                                  or _relative(p) in SPARK_FREE_MODULES], ids=_relative)
def test_numerics_never_import_spark(path):
    relative = _relative(path)
    spark = [name for name in _imports(path)
             if (name.split(".")[0] in ("pyspark", "py4j") or name.startswith("sodm_spark.spark"))
             and not name.startswith(UPWARD_EXCEPTIONS.get(relative, ()))]
    assert not spark, f"{relative} imports {spark}"


@pytest.mark.parametrize("path", [p for p in MODULES if "/" in _relative(p)], ids=_relative)
def test_no_import_runs_up_a_layer(path):
    relative = _relative(path)
    layer = LAYER[_folder(relative)]
    upward = [name for name in _imports(path)
              if name.startswith("sodm_spark.") and name.split(".")[1] in LAYER
              and name.split(".")[1] != _folder(relative)
              and LAYER[name.split(".")[1]] >= layer
              and not name.startswith(UPWARD_EXCEPTIONS.get(relative, ()))]
    assert not upward, f"{relative} imports {upward} from its own layer or one above"


@pytest.mark.parametrize("path", [p for p in MODULES if _folder(_relative(p)) == "spark"],
                         ids=_relative)
def test_sodm_and_dsvrg_stand_apart_on_the_shared_spark_modules(path):
    part = _spark_part(_relative(path))
    if part in SPARK_ENTRY:
        forbidden = ("spark.train",) if part != "spark.train" else ()
    elif part in SPARK_ALGORITHMS:
        forbidden = SPARK_ENTRY + tuple(a for a in SPARK_ALGORITHMS if a != part)
    else:  # io/, partitioning.py, session.py, memory.py and the rest
        forbidden = SPARK_ENTRY + SPARK_ALGORITHMS
    wrong = [name for name in _imports(path) if name.startswith("sodm_spark.spark.")
             and _spark_part(name.removeprefix("sodm_spark.")) in forbidden]
    assert not wrong, f"{_relative(path)} imports {wrong}"


def _import_graph(folder: str) -> dict:
    """The modules under ``folder`` (sodm_spark.spark...) and those of them each imports,
    lazily or not (a package counts as its ``__init__``)."""
    names = {}
    for path in MODULES:
        relative = _relative(path)
        if relative.startswith(folder + "/"):
            name = "sodm_spark." + relative.removesuffix(".py").replace("/", ".")
            names[name.removesuffix(".__init__")] = path
    return {name: {other for other in _imports(path) if other in names and other != name}
            for name, path in names.items()}


def _circles(graph: dict) -> list:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_engine_session_frames_and_readers_import_no_circle():
    """The back ends' modules (engine.py chooses, frames.py and in_process.py implement,
    session.py starts sessions, io/ reads) import one another one way only, lazy imports
    counted: the eight-module circle they formed (frames, session and io/) is gone, and a
    check that finds one on a planted import is a real check."""
    graph = _import_graph("spark")
    shared = [group for group in _circles(graph)
              if any(name.split(".")[2] in ("engine", "frames", "frame_rdd", "session", "io",
                                            "in_process") for name in group)]
    assert shared == []
    planted = {name: set(edges) for name, edges in graph.items()}
    planted["sodm_spark.spark.engine"].add("sodm_spark.spark.io.arrow")
    assert ["sodm_spark.spark.engine", "sodm_spark.spark.io.arrow"] in _circles(planted)


def test_what_spark_workers_import_loads_neither_scikit_learn_nor_pyspark_ml():
    code = ("import sys\n" + "".join(f"import {name}\n" for name in WORKER_IMPORTS)
            + "print(' '.join(sorted(m for m in sys.modules\n"
              "                      if m.split('.')[0] in ('sklearn', 'pyspark'))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT, env=env, timeout=300).stdout.split()
    assert not loaded, f"importing {WORKER_IMPORTS} loads {loaded}"


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_modules_read_in_one_sitting(path):
    lines = len(path.read_text().splitlines())
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert lines <= MAX_LINES or "longer than" in docstring.lower(), \
        f"{_relative(path)} has {lines} lines and no reason in its docstring"


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Positional, keyword-only, ``*args`` and ``**kwargs``; ``self`` and ``cls`` not counted."""
    arguments = function.args
    names = [*arguments.posonlyargs, *arguments.args]
    count = (len(names) + len(arguments.kwonlyargs) + (arguments.vararg is not None)
             + (arguments.kwarg is not None))
    return count - (bool(names) and names[0].arg in ("self", "cls"))


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_functions_read_top_to_bottom_and_take_few_parameters(path):
    too_long = [f"{function.name} ({function.end_lineno - function.lineno + 1} lines)"
                for function in _functions(path)
                if function.end_lineno - function.lineno + 1 > MAX_FUNCTION_LINES]
    too_wide = [f"{function.name} ({_parameter_count(function)} parameters)"
                for function in _functions(path)
                if function.name != "__init__" and _parameter_count(function) > MAX_PARAMETERS]
    assert not too_long and not too_wide, f"{_relative(path)}: {too_long + too_wide}"


def test_the_parameter_count_sees_every_kind_of_parameter():
    function = ast.parse("def f(self, a, /, b, *rest, c, **more): pass").body[0]
    assert _parameter_count(function) == 5
    method = ast.parse("def g(cls): pass").body[0]
    assert _parameter_count(method) == 0


def test_the_modules_the_workers_take_first_exist():
    """tests/conftest.py's LONGEST_MODULES name test modules of this folder: a renamed module
    would otherwise silently fall back to its place in the alphabet."""
    from conftest import LONGEST_MODULES

    missing = [name for name in LONGEST_MODULES if not (ROOT / "tests" / name).is_file()]
    assert not missing, f"tests/conftest.py's LONGEST_MODULES names no such module: {missing}"
