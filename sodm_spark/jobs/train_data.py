"""The training job's data: the built-in rows or the user's files as block RDDs, the test and
validation rows on the driver, and the checks made before the fit (the labels, the levels the
rows allow, the memory the partitions need).

Its own module because this is where a bad file or a setting the data cannot satisfy is found:
every message here names the flag and the path (docs/operations.md, "When a job fails"), before
the first level is solved.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse

from sodm_spark.core.errors import SettingsError
from sodm_spark.core.validation import check_two_classes, shown_classes
from sodm_spark.data.datasets import make_linear, make_nonlinear
from sodm_spark.jobs.train_args import DEFAULT_TEST_ROWS
from sodm_spark.spark.io import check_blocks, read_blocks, read_libsvm_local
from sodm_spark.spark.memory import check_collectable, check_fit_resources, executor_memory
from sodm_spark.spark.session import PERSIST, collect_blocks, numpy_to_blocks
from sodm_spark.spark.sodm.plan import auto_level_count, check_levels_fit_rows
from sodm_spark.spark.sodm.prepare import checked_classes
from sodm_spark.spark.train import check_classes, fit_params
from sodm_spark.spark.frames import context_of

#: What to do when --kernel laplacian meets LIBSVM rows too wide to be dense.
LAPLACIAN_ADVICE = ("use --kernel rbf or linear, which keep sparse LIBSVM rows sparse (the "
                    "laplacian kernel's L1 distances need dense rows)")


def row_layout(args):
    """(``sparse`` for the readers, what to do when rows are too wide to be dense): LIBSVM rows
    stay CSR unless at least half the cells hold a value, except for the laplacian kernel."""
    if args.format != "libsvm":
        return False, None
    if args.kernel == "laplacian":
        return False, LAPLACIAN_ADVICE
    return "auto", None


def read_driver_side(spark, path, args, n_features, sparse, flag):
    """(X, y) of a test or validation file on the driver, checked against the training data."""
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
        blocks, d = read_blocks(spark, path, args.format)
        stats = check_blocks(blocks, d, where=f"{flag} {path}")
        check_collectable(context_of(spark), 8.0 * d * stats.n_rows, f"{flag} {path}",
                          "score such a table with jobs/predict.py instead")
        pair = collect_blocks(blocks)
    if pair[0].shape[1] != n_features:
        raise ValueError(
            f"{flag} {path} has {pair[0].shape[1]} features but --data "
            f"{args.data} has {n_features}; both must describe the same columns. Give {flag[2:]} "
            "with the training data's feature columns, in the same order.")
    return pair


def check_weight_col(args):
    """Refuse ``--weight-col`` where the data have no columns to name: the built-in data and
    LIBSVM rows (a SettingsError, before any data are read)."""
    if args.weight_col is None:
        return
    if args.data is None:
        raise SettingsError("--weight-col names a column of --data, but no --data was given "
                            "(the built-in data have no weights); pass CSV or Parquet data.")
    if args.format == "libsvm":
        raise SettingsError(f"--weight-col {args.weight_col}: LIBSVM rows have no weight "
                            "column; write the data as CSV or Parquet (--format) with one.")


def weight_column(args):
    """``--weight-col`` as read_blocks takes it: a name, or for CSV a 0-based position."""
    text = args.weight_col
    return int(text) if args.format == "csv" and text is not None and text.isdigit() else text


def load_data(spark, args, params=None):
    """(training blocks RDD, classes, test (X, y) or None, n_features) for the flags given
    (``params``: the fit's, :func:`check_settings`'; None: built from ``args``)."""
    linear = args.kernel == "linear"
    if args.data is None:
        make = make_linear if linear else make_nonlinear
        X, y = make(args.rows + DEFAULT_TEST_ROWS, seed=args.seed)
        return (numpy_to_blocks(context_of(spark), X[:args.rows], y[:args.rows]),
                np.array([-1, 1]), (X[args.rows:], y[args.rows:]), X.shape[1])
    sparse, advice = row_layout(args)
    # the kernel path computes its kernel blocks in float32: its dense rows are stored so
    blocks, n_features = read_blocks(spark, args.data, args.format, sparse=sparse,
                                     dtype=np.float64 if linear else np.float32,
                                     dense_advice=advice, weight_col=weight_column(args))
    # parsed once, by the checking job; the fit's passes (SODM levels, DSVRG epochs) read the
    # rows from here (DSVRG then keeps no second copy), on local disk, not the JVM heap
    blocks = blocks.persist(PERSIST)
    classes, stats = checked_classes(blocks, n_features, with_stats=True,
                                     where=f"--data {args.data}")
    # up front: labels no fit takes are refused before the resource checks and the test rows
    check_classes(classes, linear, lambda found: refuse_classes(found, args))
    if not linear:  # the levels must fit the rows, their top partitions and the resources
        params = fit_params(vars(args)) if params is None else params
        n_rows, dense = stats.n_rows, isinstance(stats.row_width, int)
        check_levels_fit_rows(n_rows, params.p, params.levels)
        memory = executor_memory(context_of(spark), args.memory_mb, params.device)
        levels = params.levels if params.levels is not None else \
            auto_level_count(n_rows, params.p, stats.row_width, memory, params)
        # dense rows are float32; a sparse row's memory width counts float64 columns
        check_fit_resources(context_of(spark), n_rows, stats.row_width, 4 if dense else 8,
                            params.p ** levels, levels, memory, params)
    test = None if not args.test_data else read_driver_side(
        spark, args.test_data, args, n_features, sparse, "--test-data")
    return blocks, classes, test, n_features


def refuse_classes(classes, args):
    """The job's words for label values its fit cannot take (check_classes decides which)."""
    where = f"--data {args.data}"
    if args.kernel == "linear":  # DSVRG is binary; the kernel levels take any number of classes
        check_two_classes(classes, where, "--kernel linear (DSVRG)",
                          "use a nonlinear --kernel: its levels fit every class at once")
    raise ValueError(f"{where}: the labels hold 1 class ({shown_classes(classes)}); SODM needs "
                     "at least two. Check that the label column is the right one.")
