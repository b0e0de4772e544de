"""Errors raised as what they are (sodm_spark.core.errors; docs/design.md §6, "Failures").

A plain ``ValueError`` is a pure function's check of its own arguments. Where a setting, the
data or a resource enters the package, the error says which: ``SettingsError``, ``InputError``
or ``ResourceError`` (each a ValueError, and each its own exit code). Read from the files, not
imported: the layers where settings, data and resources enter raise no plain ValueError, and
neither does any function that reads a file, wherever it is.
"""
import ast
from pathlib import Path

import pytest

from sodm_spark.core.errors import (EXIT_CODES, INPUT, SETTINGS, InputError, SettingsError,
                                    failure_of, refused_as_settings)

PACKAGE = Path(__file__).resolve().parents[1] / "sodm_spark"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)

#: Where settings, data and resources enter: every module below these folders, and these
#: modules (relative to the package).
ENTRY_FOLDERS = ("spark", "jobs", "data", "ops")
ENTRY_MODULES = ("mlflow.py",)
ENTRY_PATTERNS = ("estimators/ml*.py",)

#: Calls that read a file: a bare name (``open``) or the last part of a dotted call
#: (``np.load``, ``path.read_text``, ``pq.read_table``).
READING_NAMES = {"open"}
READING_ATTRIBUTES = {"open", "read_text", "read_bytes", "load", "read_table", "ParquetFile",
                      "memmap", "fromfile", "read_rda", "read_replaced", "read_metadata",
                      "read_schema"}
#: ``x.load`` reads a file for these ``x`` only (``json.load``, ``np.load``, ``pickle.load``,
#: ``KernelExpansion.load`` ...), not ``json.loads`` or a Param's ``load`` of a dict.
LOADING_OWNERS = {"json", "np", "numpy", "pickle", "joblib", "torch", "tomllib", "yaml",
                  "KernelExpansion"}


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _is_entry_module(relative: str) -> bool:
    return (relative.split("/")[0] in ENTRY_FOLDERS or relative in ENTRY_MODULES
            or any(Path(relative).match(pattern) for pattern in ENTRY_PATTERNS))


def _raises_plain_value_error(node: ast.AST) -> bool:
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(raised, ast.Name) and raised.id == "ValueError"


def _reads_a_file(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in READING_NAMES
    if not isinstance(func, ast.Attribute) or func.attr not in READING_ATTRIBUTES:
        return False
    if func.attr != "load":
        return True
    owner = func.value
    return isinstance(owner, ast.Name) and owner.id in LOADING_OWNERS


def _own_nodes(function: ast.AST):
    """The nodes of ``function``'s body, not those of the functions defined inside it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                 ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def plain_value_errors(relative: str, source: str) -> list[str]:
    """``line N (function)`` of each plain ``raise ValueError`` that the module ``relative``
    (its text ``source``) may not hold: any in a module where settings, data or resources
    enter, else those in a function that reads a file."""
    tree = ast.parse(source)
    if _is_entry_module(relative):
        return [f"line {line}" for line in sorted(node.lineno for node in ast.walk(tree)
                                                  if _raises_plain_value_error(node))]
    found = []  # (line, where)
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        own = list(_own_nodes(function))
        if any(isinstance(node, ast.Call) and _reads_a_file(node) for node in own):
            found += [(node.lineno, f"line {node.lineno} ({function.name}, which reads a file)")
                      for node in own if _raises_plain_value_error(node)]
    return [where for _, where in sorted(found)]


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_errors_where_settings_data_or_resources_enter_say_their_kind(path):
    found = plain_value_errors(_relative(path), path.read_text())
    assert not found, (f"{_relative(path)} raises a plain ValueError at {', '.join(found)}: "
                       "raise SettingsError, InputError or ResourceError "
                       "(sodm_spark.core.errors), the message unchanged")


def test_the_scan_sees_entry_layers_and_functions_that_read_files():
    assert _is_entry_module("spark/sodm/params.py") and _is_entry_module("estimators/ml.py")
    assert _is_entry_module("mlflow.py") and _is_entry_module("data/formats/libsvm.py")
    assert not _is_entry_module("estimators/sklearn.py")
    source = ("import json\n"
              "def pure(x):\n    if x < 0:\n        raise ValueError('x')\n"
              "def parses(text):\n    if not json.loads(text):\n        raise ValueError('t')\n"
              "def reads(path):\n    with open(path) as f:\n        state = json.load(f)\n"
              "    if not state:\n        raise ValueError('empty')\n"
              "def loads_checked(path):\n    def check(s):\n        raise ValueError('s')\n"
              "    return check(path.read_text())\n")
    assert plain_value_errors("core/probe.py", source) == [
        "line 12 (reads, which reads a file)"]
    assert plain_value_errors("spark/probe.py", source) == ["line 4", "line 7", "line 12",
                                                             "line 15"]


def test_a_settings_record_refuses_with_settings_error_and_the_same_message():
    from sodm_spark.spark.dsvrg.fit import DSVRGParams
    from sodm_spark.spark.sodm.params import SODMParams

    for record, keywords, message in [
            (SODMParams, {"lam": -1.0}, "lam (λ) must be a positive finite number, got -1.0."),
            (SODMParams, {"p": 1}, "p (partitions merged per level) must be an integer >= 2"),
            (SODMParams, {"strata": 0}, "strata must be a positive integer, got 0."),
            (DSVRGParams, {"theta": 1.5}, "theta (θ) must lie in [0, 1), got 1.5."),
            (DSVRGParams, {"epochs": 0}, "epochs must be a positive integer, got 0.")]:
        with pytest.raises(SettingsError) as refused:
            record(**keywords)
        assert str(refused.value).startswith(message)
        assert failure_of(refused.value, INPUT) == (SETTINGS, str(refused.value))


def test_refused_as_settings_keeps_message_and_kind_of_what_already_has_one():
    with pytest.raises(SettingsError, match="^bad lam$") as refused:
        with refused_as_settings():
            raise ValueError("bad lam")
    assert isinstance(refused.value, ValueError) and EXIT_CODES[refused.value.kind] == 2
    with pytest.raises(InputError):  # already a kind: kept
        with refused_as_settings():
            raise InputError("a NaN in row 3")
    with pytest.raises(TypeError):  # not a refusal: passes unchanged
        with refused_as_settings():
            raise TypeError("a bug")
