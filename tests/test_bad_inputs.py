"""The bad-input matrix: every job and Python API against every bad input.

Each bad input is either handled (and the result checked against an independent reference:
scikit-learn's LIBSVM reader, the brute-force ODM dual of ``reference.py``, a ±1-label fit) or
refused; a refusal's message must say what is wrong, where (file, line, row, column, flag) and
what to do, and each of the three is asserted separately.

Decisions taken here (see sodm_spark.core.validation.MAX_ABS_VALUE for the numbers):

* |value| > 1e100 is refused naming the row: kernels square the features and 1e300 overflows
  to inf - inf = NaN (an RBF block, the variance of gamma='scale'); rescaling inside would
  change the model the user asked for.
* LIBSVM index 0 and unsorted or repeated indices are refused naming the line: the format is
  1-based and ascending (LIBSVM's own tools require it); a 0-based file shifts every column.
* A LIBSVM test file with fewer features is padded (LIBSVM omits trailing zeros); a CSV test
  set with fewer columns, or any test set with more, is refused.
* String labels are mapped by the scikit-learn estimators; the jobs and the Spark reader need
  numeric labels and say so.

The last section runs jobs/train_sodm.py and jobs/predict.py as a user does, one bad input or
setting each: its exit code (sodm_spark.core.errors), exactly one ``error:`` line, no Python or
Java trace on the console, and the outputs of earlier runs untouched.
"""
import gzip
import json
import re
import sys
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.datasets import dump_svmlight_file, load_svmlight_file
from sklearn.svm import SVC

from sodm_spark import CoresetSVMClassifier, CSVRGClassifier, ODMClassifier
from sodm_spark.core.array_namespace import gpu_available
from sodm_spark.core.errors import INPUT, RESOURCES, SETTINGS
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.spark.io import check_blocks, read_blocks, read_libsvm_local
from sodm_spark.spark.single import build_estimator

from conftest import contents, cut_in_half, make_problem, model_files
from reference import odm_dual_reference

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import predict  # noqa: E402
import train_baseline  # noqa: E402
import train_sodm  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

FAST_SODM = ["--levels", "0", "--strata", "2"]
FAST_METHOD = {"csvrg": ["--max-core", "20", "--epochs", "5"],
               "coreset-svm": ["--coreset-size", "30", "--kernel", "rbf"],
               "cvm": ["--max-core", "40"]}


def estimator(name, **params):
    """A small, fast configuration of each Python estimator (``params`` override it)."""
    if name == "cvm":
        from sodm_spark.baselines.cvm import CVMClassifier
        return CVMClassifier(**{"max_core": 40, "random_state": 0, **params})
    return {"odm": lambda: ODMClassifier(**{"max_iter": 500, **params}),
            "csvrg": lambda: CSVRGClassifier(**{"max_core": 20, "epochs": 5, "random_state": 0,
                                                **params}),
            "coreset": lambda: CoresetSVMClassifier(**{"coreset_size": 30, "kernel": "rbf",
                                                       "random_state": 0, **params})}[name]()


ESTIMATORS = ["odm", "csvrg", "coreset", "cvm"]
# CVMClassifier fits three or more classes one-vs-rest (checked in test_cvr.py)
BINARY_ONLY = ["csvrg", "coreset"]


# ------------------------------------------------------------------------------ the inputs

def replace_line(text, number, line):
    lines = text.splitlines()
    lines[number - 1] = line
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Every bad file once; the bad line of a LIBSVM file is always line 3 (row id 2)."""
    root = tmp_path_factory.mktemp("bad_inputs")
    X, y = make_problem(m=40, d=4, seed=5)
    labels = (y > 0).astype(int)

    def svm(name, X, labels):
        dump_svmlight_file(X, labels, str(root / name), zero_based=False)
        return str(root / name)

    def text(name, content):
        (root / name).write_text(content) if isinstance(content, str) else \
            (root / name).write_bytes(content)
        return str(root / name)

    good = svm("good.svm", X, labels)
    body = Path(good).read_text()
    header = "label,a,b,c,d\n"

    def csv_rows(labels, columns=4):
        return "".join(f"{label}," + ",".join(f"{v:.6f}" for v in x[:columns]) + "\n"
                       for x, label in zip(X, labels))

    degenerate = np.vstack([X, X[:10]])  # duplicate rows,
    degenerate[::5] = 0.0  # all-zero rows (some of them duplicated too)
    degenerate[:, 2] = 3.0  # and a zero-variance column
    return SimpleNamespace(
        root=root, X=X, y=y, labels=labels, good=good,
        empty=text("empty.svm", ""),
        bad_value=text("bad_value.svm", replace_line(body, 3, "1 1:0.5 2:abc")),
        binary=text("binary.svm", gzip.compress(body.encode())),
        index0=text("index0.svm", replace_line(body, 3, "0 0:1 2:0.5")),
        unsorted=text("unsorted.svm", replace_line(body, 3, "1 3:1 2:0.5")),
        nan=text("nan.svm", replace_line(body, 3, "1 1:nan 2:1")),
        inf=text("inf.svm", replace_line(body, 3, "1 1:1 2:-inf")),
        big=text("big.svm", replace_line(body, 3, "1 1:1e300 2:1")),
        csv=text("good.csv", header + csv_rows(labels)),
        bad_csv=text("bad.csv", header + replace_line(csv_rows(labels), 3, "1,0.5,blue,1,2")),
        string_labels=text("strings.csv", header + csv_rows(np.where(labels, "dog", "cat"))),
        narrow_csv=text("narrow.csv", "label,a,b,c\n" + csv_rows(labels, columns=3)),
        one_class=svm("one.svm", X, np.ones(40)),
        three=svm("three.svm", X, np.arange(40) % 3),
        twelve=svm("twelve.svm", X, labels + 1),
        wide=svm("wide.svm", np.hstack([X, X[:, :1] + 1]), labels),
        narrow=svm("narrow.svm", np.column_stack([X[:, :3], np.zeros(40)]), labels),
        tiny=svm("tiny.svm", X[:5] + 1, np.array([0, 1, 0, 1, 1])),
        const=svm("const.svm", np.ones((40, 4)), labels),
        degenerate=svm("degenerate.svm", degenerate, np.concatenate([labels, labels[:10]])),
    )


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory, inputs):
    path = tmp_path_factory.mktemp("models") / "model"
    ODMClassifier().fit(inputs.X, inputs.labels).model_.save(path)
    return path


def sodm_job_error(argv):
    with pytest.raises(SystemExit) as raised:
        train_sodm.main(argv)
    return str(raised.value.code)


def baseline_job_error(method, argv):
    with pytest.raises(SystemExit) as raised:
        train_baseline.main(["--method", method, *FAST_METHOD[method], *argv])
    return str(raised.value.code)


def api_error(call, kind=ValueError):
    with pytest.raises(kind) as raised:
        call()
    return str(raised.value)


# ------------------------------------------------------------------- refusals: the matrix

Refusal = namedtuple("Refusal", "id spark call what where todo")
"""``call(ctx)`` returns the error message; what/where/todo are regexes it must contain."""

LINE3 = r"(bad_value|binary|index0|unsorted)\.svm, line 3\b"


def refusals():
    svm_line_cases = [  # (case, file attribute, what, what to do)
        ("unreadable-line", "bad_value", r"value 'abc' .* is not a number", r"Fix the value"),
        ("index-0", "index0", r"index 0 in token '0:1'", r"1-based.*zero_based=False"),
        ("unsorted-indices", "unsorted", r"index 2 .* comes after index 3",
         r"strictly increasing: sort"),
    ]
    cases = [
        # empty file
        Refusal("empty/train_sodm", 1, lambda c: sodm_job_error(["--data", c.empty]),
                r"is empty \(0 bytes\)", r"empty\.svm", r"Check the path"),
        Refusal("empty/train_baseline", 1,
                lambda c: baseline_job_error("csvrg", ["--data", c.empty]),
                r"is empty \(0 bytes\)", r"empty\.svm", r"Check the path"),
        Refusal("empty/read_blocks", 1, lambda c: api_error(
            lambda: read_blocks(c.spark, c.empty, "libsvm")),
            r"is empty", r"empty\.svm \(format 'libsvm'\)", r"Check the path"),
        Refusal("empty/read_libsvm_local", 0, lambda c: api_error(
            lambda: read_libsvm_local(c.empty)), r"has no data lines", r"empty\.svm",
            r"Check the path"),
        Refusal("empty/SODMClassifier", 1, lambda c: api_error(
            lambda: sodm_classifier().fit(c.frame(c.X, c.labels).limit(0))),
            r"has no rows", r"the DataFrame", r"Check the input path or filter"),
        # a line that is not UTF-8 text (a compressed file without .gz)
        Refusal("unreadable-bytes/train_sodm", 1, lambda c: sodm_job_error(["--data", c.binary]),
                r"not UTF-8 text", r"binary\.svm, line 1\b", r"Decompress it"),
        Refusal("unreadable-bytes/read_libsvm_local", 0, lambda c: api_error(
            lambda: read_libsvm_local(c.binary)), r"not UTF-8 text", r"binary\.svm, line 1\b",
            r"Decompress it"),
        # NaN, ±inf and 1e300 in the training data: the LIBSVM reader names the line
        *[Refusal(f"{case}/{target}", 1, call, what, rf"{attr}\.svm, line 3\b", todo)
          for case, attr, what, todo in [
              ("nan", "nan", r"feature 1 \(nan\) is NaN or infinite", r"Remove or impute"),
              ("inf", "inf", r"feature 2 \(-inf\) is NaN or infinite", r"Remove or impute"),
              # the job reads float32 (its bound 1e15), the API float64 (1e100)
              ("1e300", "big", r"feature 1 \(1e\+300\) lies beyond ±1e\+(100|15)\b.*overflow",
               r"Rescale those features")]
          for target, call in [
              ("train_sodm", lambda c, a=attr: sodm_job_error(["--data", getattr(c, a)])),
              ("train_baseline", lambda c, a=attr: baseline_job_error(
                  "csvrg", ["--data", getattr(c, a)])),
              ("read_blocks+check_blocks", lambda c, a=attr: api_error(
                  lambda: check_blocks(*read_blocks(c.spark, getattr(c, a), "libsvm"))))]
          # both jobs read through read_blocks + check_blocks, and inf takes NaN's path there
          if (target == "train_sodm" or case == "1e300"
              or (target != "train_baseline" and case == "nan"))],
        Refusal("nan/SODMClassifier", 1, lambda c: api_error(
            lambda: sodm_classifier().fit(c.frame(c.with_value(np.nan), c.labels))),
            r"contain NaN or infinity", r"row 2 of partition 0\b", r"Remove or impute"),
        Refusal("1e300/SODMClassifier", 1, lambda c: api_error(
            lambda: sodm_classifier().fit(c.frame(c.with_value(1e300), c.labels))),
            r"beyond ±1e\+100", r"row 2 of partition 0\b", r"Rescale"),
        # a non-numeric CSV cell, and string labels where numbers are needed
        Refusal("non-numeric-csv-cell/train_sodm", 1, lambda c: sodm_job_error(
            ["--data", c.bad_csv, "--format", "csv"]), r"non-numeric value 'blue'",
            r"bad\.csv.*column 'b'", r"is read as numbers: fix or remove those cells"),
        Refusal("string-labels/train_sodm", 1, lambda c: sodm_job_error(
            ["--data", c.string_labels, "--format", "csv"]), r"non-numeric value 'dog'",
            r"strings\.csv.*the label column", r"map class names to numbers"),
        Refusal("string-labels/SODMClassifier", 1, lambda c: api_error(
            lambda: sodm_classifier().fit(c.frame(c.X, np.where(c.labels, "dog", "cat")))),
            r"has type string, not a number", r"label column 'label'", r"Map the labels"),
        # one class; three classes for the binary-only methods
        Refusal("one-class/train_sodm", 1, lambda c: sodm_job_error(["--data", c.one_class]),
                r"labels hold 1 class \(1\)", r"--data .*one\.svm", r"needs at least two"),
        Refusal("three-classes-linear/train_sodm", 1, lambda c: sodm_job_error(
            ["--data", c.three, "--kernel", "linear"]),
            r"labels hold 3 classes \(0, 1, 2\).*DSVRG\) is a binary", r"--data .*three\.svm",
            r"use a nonlinear --kernel"),
        Refusal("one-class/SODMClassifier", 1, lambda c: api_error(
            lambda: sodm_classifier().fit(c.frame(c.X, np.ones(40)))),
            r"only one class \(1\)", r"column 'label'", r"Check labelCol"),
        Refusal("three-classes-linear/SODMClassifier", 1, lambda c: api_error(
            lambda: sodm_classifier(kernel="linear").fit(c.frame(c.X, np.arange(40) % 3))),
            r"3 classes \(0, 1, 2\)", r"column 'label'", r"filter the DataFrame to two"),
        # test sets with more (or, for CSV, fewer) features than the training data
        Refusal("test-more-features/train_sodm", 1, lambda c: sodm_job_error(
            ["--data", c.good, "--test-data", c.wide, *FAST_SODM]),
            r"has 5 features but --data .* has 4", r"--test-data .*wide\.svm",
            r"training data's feature columns"),
        Refusal("test-more-features/train_baseline", 1, lambda c: baseline_job_error(
            "csvrg", ["--data", c.good, "--test-data", c.wide]),
            r"has 5 features but --data .* has 4", r"--test-data .*wide\.svm",
            r"training data's feature columns"),
        Refusal("test-fewer-csv-columns/train_sodm", 1, lambda c: sodm_job_error(
            ["--data", c.csv, "--test-data", c.narrow_csv, "--format", "csv", *FAST_SODM]),
            # both have headers: the model's columns are taken by name, the one missing named
            r"has no column 'd', which the model was trained on", r"--test-data .*narrow\.csv",
            r"add it \(the columns are taken by name"),
        Refusal("test-more-features/SODMClassificationModel.transform", 1,
                lambda c: api_error(lambda: c.spark_model().transform(
                    c.frame(np.hstack([c.X, c.X]), c.labels)).collect(), Exception),
                r"has 8 features; the model was trained on 4", r"column 'features'",
                r"training data's feature columns"),
        # more partitions than rows
        Refusal("more-partitions-than-rows/train_sodm", 1, lambda c: sodm_job_error(
            ["--data", c.tiny, "--levels", "2"]),
            r"asks for 9 partitions but the data have only 5 rows", r"levels=2 with p=3",
            r"use levels=1 \(--levels 1\) or less"),
        Refusal("more-partitions-than-rows/train_sodm-linear", 1, lambda c: sodm_job_error(
            ["--data", c.tiny, "--kernel", "linear", "--partitions", "16", "--epochs", "1"]),
            r"only 5 rows", r"16 partitions", r"pass at most 5 \(--partitions"),
        Refusal("more-partitions-than-rows/SODMClassifier", 1, lambda c: api_error(
            lambda: sodm_classifier(levels=2).fit(c.frame(c.X[:5], np.arange(5) % 2))),
            r"9 partitions but the data have only 5 rows", r"levels=2",
            r"levels=1 \(--levels 1\) or less"),
        # every feature constant: gamma='scale' has no scale (a zero-variance column is fine)
        Refusal("all-features-constant/train_sodm", 1, lambda c: sodm_job_error(
            ["--data", c.const, *FAST_SODM]), r"zero variance", r"gamma='scale'",
            r"pass a numeric gamma"),
        Refusal("all-features-constant/train_baseline", 1, lambda c: baseline_job_error(
            "csvrg", ["--data", c.const]), r"zero variance", r"csvrg refused --data .*const",
            r"pass a numeric gamma"),
    ]
    for case, attr, what, todo in svm_line_cases:
        cases += [
            Refusal(f"{case}/train_sodm", 1, lambda c, a=attr: sodm_job_error(
                ["--data", getattr(c, a)]), what, LINE3, todo),
            Refusal(f"{case}/read_blocks", 1, lambda c, a=attr: api_error(
                lambda: read_blocks(c.spark, getattr(c, a), "libsvm", min_partitions=3)),
                what, LINE3, todo),
            Refusal(f"{case}/read_libsvm_local", 0, lambda c, a=attr: api_error(
                lambda: read_libsvm_local(getattr(c, a))), what, LINE3, todo)]
    cases.append(Refusal("unreadable-line/train_baseline", 1, lambda c: baseline_job_error(
        "coreset-svm", ["--data", c.bad_value]), svm_line_cases[0][2], LINE3,
        svm_line_cases[0][3]))
    # The job checks the label count on the driver, the same way for every method: one run
    # per method; the estimators' own one- and three-class checks are in the Python tests.
    for method, attr, what, where, todo in [
            ("csvrg", "one_class", r"labels hold 1 class", r"--data .*one\.svm",
             r"needs exactly two"),
            ("coreset-svm", "three", r"labels hold 3 classes.*coreset-svm is a binary",
             r"--data .*three\.svm", r"keep the rows of two classes"),
            ("cvm", "three", r"labels hold 3 classes.*cvm is a binary", r"--data .*three\.svm",
             r"keep the rows of two classes")]:
        case = f"{'one-class' if attr == 'one_class' else 'three-classes'}/{method}-job"
        cases.append(pytest.param(
            Refusal(case, 1, lambda c, m=method, a=attr: baseline_job_error(
                m, ["--data", getattr(c, a)]), what, where, todo),
            id=case))
    return [case if not isinstance(case, Refusal) else pytest.param(case, id=case.id)
            for case in cases]


def sodm_classifier(**params):
    from sodm_spark import SODMClassifier
    return SODMClassifier(**{"levels": 0, "strata": 2, "gamma": 0.5, **params})


@pytest.fixture(scope="module")
def ctx(inputs):
    return SimpleNamespace(**vars(inputs))


def attach_spark(ctx, spark):
    from pyspark.ml.linalg import Vectors

    def frame(X, labels):
        labels = [v.item() if hasattr(v, "item") else v for v in labels]
        return spark.createDataFrame([(Vectors.dense(x), label)
                                      for x, label in zip(X, labels)], ["features", "label"])

    def with_value(value):
        X = ctx.X.copy()
        X[2, 1] = value
        return X

    def spark_model():  # the exact ODM as a Spark model: the transform does not care
        from sodm_spark import SODMClassificationModel
        expansion = ODMClassifier(gamma=0.5).fit(ctx.X, ctx.labels.astype(float)).model_
        return SODMClassificationModel(expansion)

    ctx.spark, ctx.frame, ctx.with_value, ctx.spark_model = spark, frame, with_value, spark_model


CONSOLE_TRACES = ("Traceback", "Exception in thread")
"""What no refusal may print: a Python trace, or the one a thread's uncaught error prints
(a background job still running when a failed job stops its session)."""


def assert_no_trace(case_id, console):
    for trace in CONSOLE_TRACES:
        assert trace not in console, f"{case_id}: {trace!r} on the console:\n{console}"


@pytest.mark.parametrize("case", refusals())
def test_refused_saying_what_where_and_what_to_do(case, ctx, request, capfd):
    if case.spark:
        attach_spark(ctx, request.getfixturevalue("spark"))
    message = case.call(ctx)
    for part in ("what", "where", "todo"):
        assert re.search(getattr(case, part), message, re.S), \
            f"{case.id}: the message lacks {part} ({getattr(case, part)!r}):\n{message}"
    # the Python side's console (this process's descriptors; the test session's JVM writes
    # elsewhere): the jobs run in-process here print no trace either
    assert_no_trace(case.id, "".join(capfd.readouterr()))


# -------------------------------------------------------------- the Python estimators

def with_value(X, value, row=2, column=1):
    X = X.copy()
    X[row, column] = value
    return X


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("value, what, todo", [
    (np.nan, r"contains NaN or infinity", r"Remove or impute"),
    (np.inf, r"contains NaN or infinity", r"Remove or impute"),
    (-np.inf, r"contains NaN or infinity", r"Remove or impute"),
    (1e300, r"beyond ±1e\+100.*overflow to NaN", r"Rescale those features"),
    (-1e150, r"beyond ±1e\+100", r"Rescale those features"),
], ids=["nan", "+inf", "-inf", "1e300", "-1e150"])
def test_estimators_refuse_non_finite_and_huge_values(name, value, what, todo):
    X, y = make_problem(m=40, d=4, seed=5)
    message = api_error(lambda: estimator(name).fit(with_value(X, value), y))
    assert re.search(what, message) and re.search(todo, message), message
    assert re.search(r"row 2 \(0-based; first at row 2, column 1", message), message
    fitted = estimator(name).fit(X, y)  # the same check guards prediction
    message = api_error(lambda: fitted.predict(with_value(X[:5], value, row=4)))
    assert re.search(r"row 4 .*column 1", message) and re.search(what, message), message


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimators_refuse_a_non_numeric_cell_naming_row_and_column(name):
    pandas = pytest.importorskip("pandas")
    X, y = make_problem(m=40, d=4, seed=5)
    frame = pandas.DataFrame(X, columns=["a", "b", "c", "d"])
    frame["c"] = frame["c"].astype(object)
    frame.loc[7, "c"] = "n/a"
    message = api_error(lambda: estimator(name).fit(frame, y))
    assert "non-numeric value 'n/a'" in message and "row 7, column 2 ('c')" in message
    assert "convert or encode that column" in message


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimators_refuse_empty_data_and_one_class(name):
    X, y = make_problem(m=40, d=4, seed=5)
    message = api_error(lambda: estimator(name).fit(X[:0], y[:0]))
    assert "0 sample(s) (shape=(0, 4))" in message and "minimum of 1 is required" in message
    message = api_error(lambda: estimator(name).fit(X, np.full(40, "spam")))
    assert re.search(r"(only one class|1 class).*spam", message, re.S), message


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("random_state", [-1, 1.5, True, np.random.RandomState(0)],
                         ids=["negative", "float", "bool", "RandomState"])
def test_estimators_take_only_a_repeatable_seed(name, random_state):
    X, y = make_problem(m=40, d=4, seed=5)
    message = api_error(lambda: estimator(name, random_state=random_state).fit(X, y))
    assert "random_state must be a non-negative int or None" in message, message
    first = estimator(name, random_state=None).fit(X, y).decision_function(X)
    again = estimator(name, random_state=0).fit(X, y).decision_function(X)
    np.testing.assert_array_equal(first, again)  # None means seed 0: a retry repeats


@pytest.mark.parametrize("name", BINARY_ONLY)
def test_binary_only_estimators_refuse_three_classes(name):
    X, _ = make_problem(m=40, d=4, seed=5)
    message = api_error(lambda: estimator(name).fit(X, np.arange(40) % 3))
    assert re.search(r"3 class", message) and re.search(r"binary|two", message), message


def test_odm_fits_three_classes_one_vs_rest_against_svc():
    rng = np.random.default_rng(3)
    centers = np.array([[0, 0], [4, 0], [0, 4]], dtype=float)
    labels = np.repeat(["red", "green", "blue"], 30)
    X = np.repeat(centers, 30, axis=0) + rng.normal(scale=0.7, size=(90, 2))
    model = ODMClassifier(gamma=0.5).fit(X, labels)
    reference = SVC(gamma=0.5).fit(X, labels)
    assert set(model.predict(X)) <= {"red", "green", "blue"}
    assert np.mean(model.predict(X) == reference.predict(X)) >= 0.95


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("labels", [(0, 1), (1, 2), ("no", "yes")], ids=["0-1", "1-2", "strings"])
def test_any_two_labels_map_to_the_plus_minus_one_fit(name, labels):
    X, y = make_problem(m=40, d=4, seed=5)
    reference = estimator(name).fit(X, y)  # y in {-1, +1}: the second label is +1
    mapped = np.where(y > 0, labels[1], labels[0])
    model = estimator(name).fit(X, mapped)
    np.testing.assert_allclose(model.decision_function(X), reference.decision_function(X),
                               rtol=1e-10, atol=1e-12)
    expected = np.where(reference.predict(X) > 0, labels[1], labels[0])
    np.testing.assert_array_equal(model.predict(X), expected)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("columns", [3, 5], ids=["fewer", "more"])
def test_estimators_refuse_a_test_set_with_another_feature_count(name, columns):
    X, y = make_problem(m=40, d=4, seed=5)
    model = estimator(name).fit(X, y)
    X_test = np.hstack([X, X])[:, :columns]
    message = api_error(lambda: model.predict(X_test))
    assert f"X has {columns} features" in message and "is expecting 4 features" in message


def rbf_gram(X, gamma):
    return np.exp(-gamma * cdist(X, X, "sqeuclidean"))


@pytest.mark.parametrize("case", ["all-zero-rows", "zero-variance-column"])
def test_odm_trains_degenerate_data_to_the_reference_optimum(case):
    X, y = make_problem(m=40, d=4, seed=5)
    if case == "all-zero-rows":
        X[::5] = 0.0
    else:
        X[:, 2] = 3.0  # gamma='scale' still uses the variance over all entries
    model = ODMClassifier(lam=1000.0, v=0.5, tol=1e-8, max_iter=5000, dtype="float64").fit(X, y)
    gamma = 1.0 / (X.shape[1] * X.var())
    assert model.kernel_.gamma == pytest.approx(gamma, rel=1e-12)
    Q = np.outer(y, y) * rbf_gram(X, gamma)
    objective, reference = odm_dual_reference(Q, 1000.0, 0.1, 0.5)
    assert model.objective_[0] == pytest.approx(objective, rel=1e-6, abs=1e-9)
    coef = np.zeros(40)
    coef[model.support_] = model.dual_coef_[0]
    np.testing.assert_allclose(coef, reference * y, atol=1e-5)


def test_odm_on_duplicated_rows_is_the_odm_on_the_rows():
    """Duplicating every row leaves the ODM primal unchanged (λ/(2M)·Σ over 2M equal pairs),
    so the decision function must be the same: duplicates are handled, not double-counted."""
    X, y = make_problem(m=40, d=4, seed=5)
    once = ODMClassifier(gamma=0.5, tol=1e-9, max_iter=5000, dtype="float64").fit(X, y)
    twice = ODMClassifier(gamma=0.5, tol=1e-9, max_iter=5000, dtype="float64").fit(
        np.vstack([X, X]), np.concatenate([y, y]))
    np.testing.assert_allclose(twice.decision_function(X), once.decision_function(X),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["csvrg", "coreset", "cvm"])
@pytest.mark.parametrize("case", ["all-zero-rows", "duplicate-rows", "zero-variance-column"])
def test_comparators_train_degenerate_data_like_svc(name, case):
    X, y = make_problem(m=60, d=4, seed=6)
    if case == "all-zero-rows":
        X[::6] = 0.0
    elif case == "duplicate-rows":
        X, y = np.vstack([X, X[:20]]), np.concatenate([y, y[:20]])
    else:
        X[:, 2] = -1.5
    # sized to hold every row: the approximations then have no excuse to fall behind the SVM
    full = {"csvrg": dict(max_core=100, epochs=30), "coreset": dict(coreset_size=400, C=10.0),
            "cvm": dict(max_core=100)}[name]
    model = estimator(name, **full).fit(X, y)
    assert np.isfinite(model.decision_function(X)).all()
    assert model.score(X, y) >= SVC(C=10.0).fit(X, y).score(X, y) - 0.1


def test_all_constant_features_are_refused_only_with_gamma_scale():
    X, y = np.ones((20, 3)), np.arange(20) % 2
    message = api_error(lambda: ODMClassifier().fit(X, y))
    assert "zero variance" in message and "pass a numeric gamma" in message
    assert np.isfinite(ODMClassifier(gamma=1.0).fit(X, y).decision_function(X)).all()


# ------------------------------------------------------------------------- handled by the jobs

def job_model(tmp_path, run):
    run(["--model-out", str(tmp_path / "model"), "--metrics-out", str(tmp_path / "m.json")])
    return KernelExpansion.load(tmp_path / "model"), json.loads((tmp_path / "m.json").read_text())


@pytest.mark.parametrize("case", ["labels-1-2", "zero-rows+duplicates+zero-variance-column"])
def test_sodm_job_level_zero_equals_the_exact_odm(spark, inputs, tmp_path, case):
    """At --levels 0 SODM solves the whole problem: the model must be ODMClassifier's. The
    degenerate rows and column share one file (one Spark run); the Python estimators have
    one test each above."""
    path = inputs.twelve if case == "labels-1-2" else inputs.degenerate
    model, _ = job_model(tmp_path, lambda extra: train_sodm.main(
        ["--data", path, *FAST_SODM, "--tol", "1e-7", "--scale", "none",
         "--lam", "1000", "--v", "0.5", *extra]))  # the same problem on both sides
    X, labels = load_svmlight_file(path, n_features=4)
    X = X.toarray()
    reference = ODMClassifier(lam=1000.0, v=0.5, tol=1e-7, max_iter=5000,
                              dtype="float64").fit(X, labels)
    np.testing.assert_array_equal(model.classes, reference.classes_)
    scores = reference.decision_function(X)
    np.testing.assert_allclose(model.decision_function(X), scores, rtol=1e-3, atol=1e-3)
    clear = np.abs(scores) > 1e-3  # float32 kernel caches: only near-ties may differ
    np.testing.assert_array_equal(model.predict(X)[clear], reference.predict(X)[clear])


@pytest.mark.parametrize("method", ["coreset-svm", "cvm"])
def test_baseline_job_labels_one_two_give_the_local_estimator(spark, inputs, tmp_path, method):
    model, _ = job_model(tmp_path, lambda extra: train_baseline.main(
        ["--method", method, "--data", inputs.twelve, *FAST_METHOD[method], *extra]))
    X, labels = load_svmlight_file(inputs.twelve, n_features=4)
    X = X.toarray()
    params = train_baseline.estimator_params(train_baseline.parse_args(
        ["--method", method, *FAST_METHOD[method]]))
    local = build_estimator(method, params).fit(X, labels)
    assert list(model.classes) == [1.0, 2.0]
    np.testing.assert_array_equal(model.predict(X), local.predict(X))
    assert set(model.predict(X)) <= {1.0, 2.0}


def test_baseline_job_pads_a_libsvm_test_file_with_fewer_features(spark, inputs, tmp_path):
    """LIBSVM leaves out trailing zero features, so a narrower test file is zero-padded."""
    model, metrics = job_model(tmp_path, lambda extra: train_baseline.main(
        ["--method", "csvrg", "--data", inputs.good, "--test-data", inputs.narrow,
         *FAST_METHOD["csvrg"], *extra]))
    X_test, y_test = load_svmlight_file(inputs.narrow, n_features=4)
    assert read_libsvm_local(inputs.narrow)[0].shape[1] == 3  # the file really is narrower
    assert metrics["test_accuracy"] == pytest.approx(np.mean(model.predict(X_test.toarray())
                                                             == y_test))


def test_coreset_svm_job_with_more_partitions_than_rows(spark, inputs, tmp_path):
    _, metrics = job_model(tmp_path, lambda extra: train_baseline.main(
        ["--method", "coreset-svm", "--data", inputs.tiny, "--partitions", "6",
         "--coreset-size", "10", *extra]))
    assert 0 < metrics["n_coreset"] <= 5


# ----------------------------------------------------------------------------- the readers

def test_read_blocks_with_more_partitions_than_rows_keeps_every_row(spark, inputs):
    blocks, d = read_blocks(spark, inputs.tiny, "libsvm", min_partitions=7)
    parts = blocks.collect()
    ids = np.concatenate([b.row_ids for b in parts])
    order = np.argsort(ids)
    X_ref, y_ref = load_svmlight_file(inputs.tiny)
    assert d == X_ref.shape[1] and list(ids[order]) == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(np.concatenate([b.X for b in parts])[order], X_ref.toarray())
    np.testing.assert_array_equal(np.concatenate([b.y for b in parts])[order], y_ref)


@pytest.mark.parametrize("attr", ["nan", "inf", "big"])
def test_read_libsvm_local_parses_special_values_like_sklearn_and_fit_names_the_row(inputs,
                                                                                     attr):
    X, y = read_libsvm_local(getattr(inputs, attr))
    X_ref, y_ref = load_svmlight_file(getattr(inputs, attr), n_features=X.shape[1])
    np.testing.assert_array_equal(X, X_ref.toarray())  # NaN == NaN here
    np.testing.assert_array_equal(y, y_ref)
    message = api_error(lambda: ODMClassifier().fit(X, y))
    assert "row 2 (0-based; first at row 2, column " in message


@pytest.mark.parametrize("attr, what", [
    ("nan", r"feature 1 \(nan\) is NaN or infinite\. Remove or impute"),
    ("inf", r"feature 2 \(-inf\) is NaN or infinite\. Remove or impute"),
    ("big", r"feature 1 \(1e\+300\) lies beyond ±1e\+100, whose square overflows the kernels"
     r".*Rescale")])
def test_the_jobs_driver_side_reads_name_the_line_of_a_bad_value(inputs, attr, what):
    """Test, validation and holdout files are read on the driver: the jobs ask the reader to
    refuse such values itself, naming the line, as the Spark reader does for --data."""
    message = api_error(lambda: read_libsvm_local(getattr(inputs, attr), check_values=True))
    assert re.search(rf"{attr}\.svm, line 3: {what}", message), message


# ------------------------------------------------------------------------------ saved models

def copy_model(saved_model, tmp_path):
    import shutil
    target = tmp_path / "copy"
    shutil.copytree(saved_model, target)
    return target


@pytest.mark.parametrize("damage, what, todo", [
    (lambda m: cut_in_half(model_files(m) / "arrays.npz"), r"arrays\.npz is truncated or corrupt",
     r"Copy the whole model directory again, or retrain"),
    (lambda m: (model_files(m) / "metadata.json").unlink(), r"incomplete \(truncated\) model: metadata\.json "
     r"is missing", r"Copy the whole model directory again, or retrain"),
    (lambda m: (model_files(m) / "arrays.npz").unlink(), r"incomplete \(truncated\) model: arrays\.npz is "
     r"missing", r"Copy the whole model directory again"),
    (lambda m: cut_in_half(model_files(m) / "metadata.json"), r"metadata\.json is truncated or corrupt",
     r"Copy the whole model directory again"),
    (lambda m: (model_files(m) / "metadata.json").write_text(
        (model_files(m) / "metadata.json").read_text().replace('"format_version": 1',
                                                               '"format_version": 7')),
     r"version 7; this sodm_spark reads 'sodm_spark\.KernelExpansion' versions 1, 2",
     r"Retrain, or load it with the version that wrote it"),
], ids=["npz-cut-in-half", "metadata-missing", "npz-missing", "metadata-cut", "other-version"])
def test_damaged_or_foreign_model_directories_are_refused(saved_model, tmp_path, damage, what,
                                                          todo):
    model = copy_model(saved_model, tmp_path)
    damage(model)
    message = api_error(lambda: KernelExpansion.load(model))
    assert re.search(what, message) and re.search(todo, message), message
    assert str(model) in message


def test_a_path_that_is_not_a_model_directory_is_refused(saved_model, tmp_path):
    for path, what in [(tmp_path / "nothing", "no such directory"),
                       (model_files(saved_model) / "metadata.json", "it is a file, not a directory")]:
        # the path bound as a default: api_error calls it at once, but a closure over the
        # loop variable reads as if it might not
        message = api_error(lambda path=path: KernelExpansion.load(path))
        assert f"{path} is not a saved model: {what}" in message
        assert "holds metadata.json and arrays.npz" in message
    (tmp_path / "other").mkdir()
    message = api_error(lambda: KernelExpansion.load(tmp_path / "other"))
    assert "not a saved model: metadata.json is missing" in message


def test_spark_ml_model_with_a_truncated_data_directory_is_refused(spark, ctx, tmp_path):
    from sodm_spark import SODMClassificationModel
    attach_spark(ctx, spark)
    ctx.spark_model().write().overwrite().save(str(tmp_path / "ml"))
    cut_in_half(model_files(tmp_path / "ml") / "data" / "arrays.npz")
    message = api_error(lambda: SODMClassificationModel.load(str(tmp_path / "ml")))
    assert re.search(r"ml/v-000001/data/arrays\.npz is truncated or corrupt.*Copy the whole model", message)


# ------------------------------------------------------------ the jobs as a user runs them

JobCase = namedtuple("JobCase", "id job argv kind message kept runs")
"""One bad input or setting given to a job: ``argv(files)`` its flags, ``kind`` the failure's
kind (its exit code), ``message`` a regex of its one ``error:`` line, ``kept(files)`` the
outputs already in place that it must leave as they were. ``runs``: "python" (a process of its
own, refused before Spark starts), "spark-submit" (a Spark application of its own, whose
console is the user's), or "in-process" (the job's entry point, sodm_spark.core.errors.run_job,
inside this test process and its Spark session, the console read from the file descriptors:
for refusals on the driver, where no task fails; a Spark start per case would take the matrix
past its time)."""


@pytest.fixture(scope="module")
def job_files(inputs, saved_model, tmp_path_factory):
    """The inputs of the job matrix, and outputs of earlier runs that must survive a failure."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("jobs")

    def parquet(name, X):
        features = pa.array([list(map(float, row)) for row in X], pa.list_(pa.float64()))
        pq.write_table(pa.table({"label": inputs.labels.astype(float), "features": features}),
                       root / name)
        return root / name

    nan = inputs.X.copy()
    nan[2, 1] = np.nan
    (root / "predictions").mkdir()  # an earlier scoring's output
    pq.write_table(pa.table({"row_id": [0, 1], "prediction": [1.0, 0.0]}),
                   root / "predictions" / "part-0.parquet")
    shutil.copytree(saved_model, root / "model")  # an earlier training's model and metrics
    (root / "metrics.json").write_text('{"test_accuracy": 0.97}')
    (root / "taken").write_text("keep me")
    # a model of 5 features, and rows of 4 numeric feature columns (no features column)
    ODMClassifier().fit(np.hstack([inputs.X, inputs.X[:, :1] ** 2]),
                        inputs.labels).model_.save(root / "model5")
    pq.write_table(pa.table({"label": inputs.labels.astype(float),
                             **{name: inputs.X[:, j] for j, name in enumerate("abcd")}}),
                   root / "columns.parquet")
    return SimpleNamespace(
        inputs=inputs, model=saved_model, nan_parquet=parquet("nan.parquet", nan),
        model5=root / "model5", columns_parquet=root / "columns.parquet",
        wide_parquet=parquet("wide.parquet", np.hstack([inputs.X, inputs.X[:, :1]])),
        old_out=root / "predictions", old_model=root / "model",
        old_metrics=root / "metrics.json", taken=root / "taken", missing=root / "missing.svm",
        root=root)


def job_cases():
    def case(id, job, argv, kind, message, kept=lambda f: [], runs="in-process", marks=()):
        return pytest.param(JobCase(id, job, argv, kind, message, kept, runs), id=id,
                            marks=marks)

    def train_outputs(f):
        return ["--model-out", f.old_model, "--metrics-out", f.old_metrics]

    def scoring(f, data, *extra):
        return ["--model", f.model, "--data", data, "--out", f.old_out, "--overwrite", *extra]

    model_and_metrics = lambda f: [f.old_model, f.old_metrics]  # noqa: E731
    predictions = lambda f: [f.old_out]  # noqa: E731
    return [
        # refused before Spark starts
        case("train_sodm/bad-flag-value", "train_sodm", lambda f: ["--levels", "many"],
             SETTINGS, r"argument --levels: --levels must be an integer >= 0 or 'auto', got "
             r"'many'; see train_sodm\.py --help$", runs="python"),
        case("train_sodm/existing-file-as-model-out", "train_sodm",
             lambda f: ["--data", f.missing, "--model-out", f.taken], SETTINGS,
             r"--model-out .*taken is a file; this output is a directory",
             lambda f: [f.taken], runs="python"),
        case("train_sodm/memory-mb-not-positive", "train_sodm",
             lambda f: ["--data", f.inputs.good, "--memory-mb", "-5", *train_outputs(f)],
             SETTINGS, r"memory_mb \(--memory-mb\) must be a positive number of MB, got -5\.0",
             model_and_metrics),
        case("train_sodm/more-levels-than-rows", "train_sodm",
             lambda f: ["--rows", "500", "--levels", "7", *train_outputs(f)], SETTINGS,
             r"levels=7 with p=3 asks for 2187 partitions but the data have only 500 rows; use "
             r"levels=5 \(--levels 5\) or less", model_and_metrics, runs="python"),
        case("predict/existing-out", "predict", lambda f: [
            "--model", f.model, "--data", f.nan_parquet, "--out", f.old_out], SETTINGS,
             r"--out .*predictions exists; pass --overwrite", predictions, runs="python"),
        case("predict/missing-model", "predict", lambda f: [
            "--model", f.root / "nope", "--data", f.nan_parquet, "--out", f.old_out,
            "--overwrite"], INPUT, r"--model: .*nope is not a saved model: no such directory",
             predictions, runs="python"),
        case("predict/bad-flag-value", "predict", lambda f: [*scoring(f, f.nan_parquet),
                                                             "--precision", "float16"],
             SETTINGS, r"argument --precision: invalid choice: 'float16'", predictions),
        # a Spark application each: a bad row found inside the scoring tasks, a bad line
        # found by the reader's job
        case("predict/nan-feature-in-parquet", "predict", lambda f: scoring(
            f, f.nan_parquet, "--metrics-out", f.old_metrics), INPUT,
             r"--data .*nan\.parquet: row 2 of partition 0 has a missing, NaN or infinite "
             r"feature; fill or drop such rows before scoring", lambda f: [f.old_out,
                                                                           f.old_metrics],
             runs="spark-submit"),
        # refused by the driver while the scoring's warm-up job runs in a thread of its
        # own: the warm-up must end before the session stops, quietly
        case("predict/fewer-feature-columns-than-the-model", "predict", lambda f: [
            "--model", f.model5, "--data", f.columns_parquet, "--out", f.old_out,
            "--overwrite"], INPUT,
             r"^error: --data .*columns\.parquet: the data have 4 feature columns \(a, b, c, "
             r"d\); the model was trained on 5\. Give the training data's feature columns, in "
             r"the same order\.$", predictions, runs="spark-submit"),
        case("train_sodm/malformed-libsvm-line", "train_sodm", lambda f: [
            "--data", f.inputs.bad_value, *train_outputs(f)], INPUT,
             r"bad_value\.svm, line 3: value 'abc' in token '2:abc' is not a number\. Fix",
             model_and_metrics, runs="spark-submit"),
        # refused by the driver once Spark runs
        case("train_sodm/memory-budget-too-small", "train_sodm", lambda f: [
            "--data", f.inputs.good, "--levels", "0", "--memory-mb", "0.001", *train_outputs(f)],
             RESOURCES, r"the top level's partitions \(1 of 40 rows × 4 features\) need about 0 "
             r"MB each to solve, over the 0\.001 MB a task may use \(memory_mb / --memory-mb\); "
             r"start from more partitions, levels=2 \(--levels 2\), or give a larger memory_mb "
             r"\(--memory-mb\)",
             model_and_metrics),
        # the --data path does not exist: refused for the device, so before any data are read
        case("train_sodm/device-gpu-without-a-gpu", "train_sodm", lambda f: [
            "--data", f.missing, "--device", "gpu", *train_outputs(f)], RESOURCES,
             r"device='gpu' \(--device gpu\) needs a CUDA GPU that PyTorch or CuPy can see, "
             r"and .*; install sodm-spark\[gpu\] on a machine with a GPU \(on a cluster: "
             r"spark\.executor\.resource\.gpu\.amount .*\), or use --device cpu$",
             model_and_metrics, marks=pytest.mark.skipif(gpu_available(),
                                                         reason="this machine has a GPU")),
        case("train_sodm/label-not-a-number", "train_sodm", lambda f: [
            "--data", f.inputs.string_labels, "--format", "csv", *train_outputs(f)], INPUT,
             r"strings\.csv, line 2 \(format 'csv'\): column 'label' \(the label column, "
             r"column 1 of 5\) holds the non-numeric value '(cat|dog)' .*; 40 lines of the "
             r"input have such cells\. Labels must be numbers", model_and_metrics),
        case("train_sodm/one-class", "train_sodm", lambda f: [
            "--data", f.inputs.one_class, *train_outputs(f)], INPUT,
             r"--data .*one\.svm: the labels hold 1 class \(1\); SODM needs at least two",
             model_and_metrics),
        case("train_sodm/missing-data-path", "train_sodm", lambda f: [
            "--data", f.missing, *train_outputs(f)], INPUT,
             r"missing\.svm \(format 'libsvm'\) does not exist\. Check the path",
             model_and_metrics),
        case("train_sodm/nan-feature-in-libsvm", "train_sodm", lambda f: [
            "--data", f.inputs.nan, *train_outputs(f)], INPUT,
             r"nan\.svm, line 3: feature 1 \(nan\) is NaN or infinite\. Remove or impute",
             model_and_metrics),
        case("predict/feature-count-differs-from-the-model", "predict",
             lambda f: scoring(f, f.wide_parquet), INPUT,
             r"the rows have 5 features in 'features'; the model was trained on 4\. Score data "
             r"with the training data's feature columns", predictions),
        case("predict/malformed-libsvm-line", "predict", lambda f: scoring(
            f, f.inputs.bad_value, "--format", "libsvm"), INPUT,
             r"--data .*bad_value\.svm: .*bad_value\.svm, line 3: value 'abc' in token '2:abc' "
             r"is not a number", predictions),
    ]


def run_as_user(case, argv, cwd):
    """(exit code, console) of ``jobs/<job>.py`` started the way ``case.runs`` says, in ``cwd``
    (its logs/ lands there)."""
    import os
    import subprocess

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_CONF_DIR=str(ROOT / "conf"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("SODM_LOG_FILE", None)
    script = str(ROOT / "jobs" / f"{case.job}.py")
    command = ([sys.executable, script] if case.runs == "python" else
               ["spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                script])
    result = subprocess.run(command + argv, env=env, cwd=cwd, capture_output=True, text=True,
                            timeout=600)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("case", job_cases())
def test_a_job_fails_with_its_exit_code_one_error_line_and_nothing_lost(case, job_files,
                                                                        tmp_path, request):
    from sodm_spark.core.errors import EXIT_CODES, run_job

    argv = [str(arg) for arg in case.argv(job_files)]
    kept = {str(path): contents(path) for path in case.kept(job_files)}
    if case.runs == "in-process":
        request.getfixturevalue("spark")
        capfd = request.getfixturevalue("capfd")
        try:
            code = run_job({"train_sodm": train_sodm, "predict": predict}[case.job].main, argv)
        except SystemExit as stop:  # argparse's refusal ends the process before run_job
            code = stop.code
        console = "".join(capfd.readouterr())
    else:
        code, console = run_as_user(case, argv, tmp_path)
    assert code == EXIT_CODES[case.kind], f"{case.id}: exit code {code}\n{console}"
    errors = [line for line in console.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("error: "), console
    assert re.search(case.message, errors[0]), f"{case.id}: {errors[0]}"
    assert_no_trace(case.id, console)
    assert "\tat org.apache" not in console, f"{case.id}: a Java stack on the console:\n{console}"
    assert not re.search(r"^\S+ \S+ ERROR ", console, re.M), console  # no Spark error log
    for path, before in kept.items():
        assert contents(path) == before, f"{case.id}: {path} changed"
    leftovers = [p.name for p in job_files.root.iterdir() if ".tmp" in p.name]
    assert not leftovers, f"{case.id}: staging left behind: {leftovers}"
    if case.id == "predict/fewer-feature-columns-than-the-model":  # refused before any
        # scoring: besides the Java runtime's own start-up warnings, nothing but the error
        others = [line for line in console.splitlines()
                  if line not in errors and not line.startswith("WARNING: ")]
        assert not others, f"{case.id}: more than the error line:\n{console}"
    if case.id == "predict/nan-feature-in-parquet":  # the failed tasks' traces: in the log
        log = (tmp_path / "logs" / "sodm-spark.log").read_text()
        assert "Traceback" in log and "\tat org.apache.spark" in log
