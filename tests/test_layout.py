"""The package layout docs/design.md and the package docstrings promise.

Read from the files, not imported: each module named in the table of docs/design.md §5 ("Layers
of the package") exists and each module is named there; numerics never import Spark; no import
runs up a layer; modules read in one sitting (about 400 lines) or say in their docstring why not.
"""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sodm_spark"


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)

# Packages whose modules must never import Spark (docs/design.md §5: numerics free of Spark).
# (storage.py is not among them: it reaches hdfs:// and other URIs through the running
# Spark session's Hadoop FileSystem, imported only when such a path is given.)
SPARK_FREE = ("solvers", "partition", "formats", "baselines", "kernels.py", "model.py",
              "validation.py", "datasets.py", "compression.py", "scoring.py", "stopping.py",
              "tuning.py", "estimator_inputs.py", "sklearn.py", "sparse_rows.py",
              "column_stats.py", "big_data.py")
# Lower layers never import the layers above them.
UPWARD = {"spark": ("sodm_spark.ml", "sodm_spark.benchmarking"),
          "solvers": ("sodm_spark.spark", "sodm_spark.baselines", "sodm_spark.sklearn",
                      "sodm_spark.ml", "sodm_spark.benchmarking"),
          "baselines": ("sodm_spark.spark", "sodm_spark.ml", "sodm_spark.benchmarking")}
MAX_LINES = 420  # "about 400"


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


DESIGN = ROOT / "docs" / "design.md"
LAYERS_HEADING = "## 5. Layers of the package"


def _what_is_here() -> str:
    """The section of docs/design.md that names every module (the README links to it)."""
    text = DESIGN.read_text()
    return text.split(LAYERS_HEADING, 1)[1].split("\n## ", 1)[0]


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


@pytest.mark.parametrize("path", [p for p in MODULES if _relative(p).startswith(SPARK_FREE)],
                         ids=_relative)
def test_numerics_never_import_spark(path):
    relative = _relative(path)
    spark = [name for name in _imports(path)
             if name.split(".")[0] in ("pyspark", "py4j") or name.startswith("sodm_spark.spark")]
    assert not spark, f"{relative} imports {spark}"


@pytest.mark.parametrize("path", [p for p in MODULES if _relative(p).split("/")[0] in UPWARD],
                         ids=_relative)
def test_no_import_runs_up_a_layer(path):
    layer = _relative(path).split("/")[0]
    upward = [name for name in _imports(path) if name.startswith(UPWARD[layer])]
    assert not upward, f"{_relative(path)} imports {upward} from a layer above"


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_modules_read_in_one_sitting(path):
    lines = len(path.read_text().splitlines())
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert lines <= MAX_LINES or "longer than" in docstring.lower(), \
        f"{_relative(path)} has {lines} lines and no reason in its docstring"
