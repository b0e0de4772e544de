"""The training job's data: the built-in rows or the user's files as block RDDs, the test and
validation rows on the driver, and the checks of the rows before the fit, in the job's words
(the library's :func:`~sodm_spark.spark.train.check_rows` makes them: the labels, the level
count, the levels the rows allow, the memory the partitions need).

Its own module because this is where a bad file or a setting the data cannot satisfy is found:
every message here names the flag and the path (docs/operations.md, "When a job fails"), before
the first level is solved.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.sparse

from sodm_spark.core.errors import InputError, SettingsError
from sodm_spark.core.kernels import kernel_class
from sodm_spark.core.timeline import Timeline, timed
from sodm_spark.core.validation import check_two_classes, shown_classes
from sodm_spark.data.datasets import make_linear, make_nonlinear
from sodm_spark.jobs.train_args import DEFAULT_TEST_ROWS
from sodm_spark.core.feature_names import columns_by_name, extra_columns_line
from sodm_spark.spark.io import (FeatureColumns, TableColumns, check_blocks, read_blocks,
                                 read_libsvm_local, table_feature_names)
from sodm_spark.spark.memory import check_collectable
from sodm_spark.spark.engine import PERSIST
from sodm_spark.spark.io import collect_blocks, numpy_to_blocks
from sodm_spark.spark.sodm.params import SODMParams
from sodm_spark.spark.train import check_rows
from sodm_spark.spark.engine import context_of

def dense_rows_advice(kernel_name: str) -> str:
    """What to do when ``--kernel kernel_name``, which needs dense rows, meets LIBSVM rows too
    wide to be dense."""
    return (f"use --kernel rbf or linear, which keep sparse LIBSVM rows sparse (the "
            f"{kernel_class(kernel_name).name} kernel needs dense rows)")


def row_layout(args):
    """(``sparse`` for the readers, what to do when rows are too wide to be dense): LIBSVM rows
    stay CSR unless at least half the cells hold a value, except for a kernel that refuses
    sparse rows (laplacian: :attr:`Kernel.sparse_refusal
    <sodm_spark.core.kernels.Kernel.sparse_refusal>`)."""
    if args.format != "libsvm":
        return False, None
    if kernel_class(args.kernel).sparse_refusal is not None:
        return False, dense_rows_advice(args.kernel)
    return "auto", None


def read_driver_side(spark, path, args, n_features, sparse, flag,
                     features: FeatureColumns | None = None):
    """(X, y) of a test or validation file on the driver, checked against the training data:
    the training input's named ``features`` taken by name (any order; a column the training
    rows lack left out and named in one line, a missing one refused), else by position."""
    if args.format == "libsvm":  # a NaN or too large value is refused naming its line
        advice = row_layout(args)[1]
        pair = read_libsvm_local(path, sparse=sparse, check_values=True, dense_advice=advice)
        if pair[0].shape[1] < n_features:  # LIBSVM omits trailing zero columns
            pair = read_libsvm_local(path, n_features=n_features, sparse=sparse,
                                     dense_advice=advice)
        elif pair[0].shape[1] > n_features and scipy.sparse.issparse(pair[0]):
            # terms no training row has (text: new words): no support vector has them, so
            # they change no prediction (rbf: every kernel value by one factor, unless a
            # --kernel-offset is added; linear and poly: no inner product)
            beyond = int(pair[0].nnz - pair[0][:, :n_features].nnz)
            print(f"{flag} {path}: left out {beyond:,} value{'s' if beyond != 1 else ''} in "
                  f"columns beyond the training data's {n_features:,} (features no training "
                  "row has)", flush=True)
            pair = (pair[0][:, :n_features].tocsr(), pair[1])
    else:  # and CSV lines by the reader, Parquet rows by partition and row
        blocks, d = _named_rows(spark, path, args, features or FeatureColumns(), flag)
        stats = check_blocks(blocks, d, where=f"{flag} {path}")
        check_collectable(context_of(spark), 8.0 * d * stats.n_rows, f"{flag} {path}",
                          "score such a table with jobs/predict.py instead")
        pair = collect_blocks(blocks)
    if pair[0].shape[1] != n_features:
        raise InputError(
            f"{flag} {path} has {pair[0].shape[1]} features but --data "
            f"{args.data} has {n_features}; both must describe the same columns. Give {flag[2:]} "
            "with the training data's feature columns, in the same order.")
    return pair


def _named_rows(spark, path, args, features: FeatureColumns, flag):
    """(blocks, d) of a CSV or Parquet file scored beside the training data: the training
    input's named ``features`` looked up in its schema or header first, then read by name in
    that order (one read), else its columns by position."""
    columns, names = table_columns(args, weight=False), features.names
    if features.categories is not None:  # the raw columns, encoded as the training rows were
        names = features.categories.input_columns
    found = None if names is None else table_feature_names(spark, path, args.format, columns)
    if names is not None and found is not None:
        _, extra = columns_by_name(names, found, f"{flag} {path}")
        if extra:
            print(extra_columns_line(extra, f"{flag} {path}"), flush=True)
        columns = table_columns(args, weight=False, features=names)
    return read_blocks(spark, path, args.format,
                       columns=replace(columns, categories=features.categories,
                                       fit_strings=False))


def table_columns(args, weight: bool = True, features=None) -> TableColumns:
    """The columns of --data (or, ``weight`` False, of a file scored beside it) as the
    readers take them: --label-col, --features-col (a vector or array column, or names split
    at commas), --weight-col; ``features``: the feature columns' names, in the order wanted."""
    given = getattr(args, "features_col", None)
    if features is None and given is not None and "," in given:
        features = tuple(name.strip() for name in given.split(",") if name.strip())
    label = getattr(args, "label_col", None)
    if label is not None and args.format == "csv" and label.isdigit():
        label = int(label)
    return TableColumns(label_col=label,
                        features_col=features if features is not None else given or "features",
                        weight_col=weight_column(args) if weight else None)


def check_column_flags(args):
    """Refuse --weight-col, --features-col and --label-col where the data have no columns to
    name: the built-in data and LIBSVM rows (a SettingsError, before any data are read)."""
    for flag in ("--weight-col", "--features-col", "--label-col"):
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is None:
            continue
        if args.data is None:
            raise SettingsError(f"{flag} names a column of --data, but no --data was given "
                                "(the built-in data have no columns to name); pass CSV or "
                                "Parquet data.")
        if args.format == "libsvm":
            has = "weight column" if flag == "--weight-col" else "named columns"
            raise SettingsError(f"{flag} {value}: LIBSVM rows have no {has} (a line is a label "
                                "and index:value pairs); write the data as CSV or Parquet "
                                "(--format) with one.")


def weight_column(args):
    """``--weight-col`` as read_blocks takes it: a name, or for CSV a 0-based position."""
    text = args.weight_col
    return int(text) if args.format == "csv" and text is not None and text.isdigit() else text


def load_data(spark, args, params, timeline: Timeline | None = None) -> tuple:
    """(training blocks RDD, n_features, the :class:`~sodm_spark.spark.train.Checked` fit,
    test (X, y) or None) for the flags given; ``params``: the fit's
    (:func:`~sodm_spark.jobs.train_sodm.check_settings`'). The rows are checked before the test
    rows are read: labels no fit takes, or levels the rows or the resources cannot hold, are
    refused first. The stages of ``timeline``: ``reading`` (the rows read into blocks, the
    checking pass), ``test rows`` (--test-data read onto the driver)."""
    linear, sc = args.kernel == "linear", context_of(spark)
    args.feature_columns = FeatureColumns()  # the built-in rows have no names
    if args.data is None:
        with timed(timeline, "reading"):
            make = make_linear if linear else make_nonlinear
            X, y = make(args.rows + DEFAULT_TEST_ROWS, seed=args.seed)
            blocks = numpy_to_blocks(sc, X[:args.rows], y[:args.rows])
            # the generators' labels are -1 and +1 (int: the saved model's classes stay so)
            checked = check_rows(sc, blocks, X.shape[1], params, classes=np.array([-1, 1]))
        return blocks, X.shape[1], checked, (X[args.rows:], y[args.rows:])
    with timed(timeline, "reading"):
        blocks, n_features, checked, features = _read_checked(spark, args, params, linear)
    args.feature_columns = features  # the model's names, and the other inputs' columns by them
    with timed(timeline if args.test_data else None, "test rows"):
        test = None if not args.test_data else read_driver_side(
            spark, args.test_data, args, n_features, row_layout(args)[0], "--test-data",
            features)
    return blocks, n_features, checked, test


def _read_checked(spark, args, params, linear: bool) -> tuple:
    """(the --data rows as persisted blocks, their features, the Checked fit, the names and
    types of the feature columns): read, then checked in one pass."""
    sc = context_of(spark)
    sparse, advice = row_layout(args)
    # the kernel path computes its kernel blocks in float32: its dense rows are stored so
    dtype = np.float64 if linear else np.float32
    blocks, n_features, features = read_blocks(spark, args.data, args.format, sparse=sparse,
                                               dtype=dtype, dense_advice=advice,
                                               columns=replace(table_columns(args),
                                                               fold_seed=args.seed),
                                               with_names=True)
    if features.categories is not None and isinstance(params, SODMParams):
        # one-hot features a numeric column's range apart once scaled (core/categories.py)
        params = replace(params, feature_weights=tuple(
            features.categories.feature_weights().tolist()))
    # parsed once, by the checking job; the fit's passes (SODM levels, DSVRG epochs) read the
    # rows from here (DSVRG then keeps no second copy), on local disk, not the JVM heap
    blocks = blocks.persist(PERSIST)
    checked = check_rows(sc, blocks, n_features, params, where=f"--data {args.data}",
                         refuse_classes=lambda found: refuse_classes(found, args),
                         dense_itemsize=np.dtype(dtype).itemsize)
    return blocks, n_features, checked, features


def refuse_classes(classes, args):
    """The job's words for label values its fit cannot take (check_classes decides which)."""
    where = f"--data {args.data}"
    if args.kernel == "linear":  # DSVRG is binary; the kernel levels take any number of classes
        check_two_classes(classes, where, "--kernel linear (DSVRG)",
                          "use a nonlinear --kernel: its levels fit every class at once")
    raise InputError(f"{where}: the labels hold 1 class ({shown_classes(classes)}); SODM needs "
                     "at least two. Check that the label column is the right one.")
