"""Sparse (CSR) rows on the kernel path: the same kernel blocks, landmarks, strata, scaling and
models as their dense copies, sparse support vectors saved and scored, and rows too wide to be
dense refused naming their line (while as sparse rows they train)."""
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import cdist
from sklearn.datasets import dump_svmlight_file

from sodm_spark import ODMClassifier
from sodm_spark.core.column_stats import ColumnStats, scale_rows
from sodm_spark.core.kernels import Kernel, decision_values, kernel_matrix
from sodm_spark.core.sparse_rows import DENSE_COLUMN_MIN_ROWS, SparseOperand, inner_products
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.models.scoring import SupportSet
from sodm_spark.partition import nearest_landmark, select_landmarks

from conftest import model_files

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "jobs"))
import predict  # noqa: E402
import train_sodm  # noqa: E402

WIDE = 2_000_000_000  # a feature index no dense row can hold


def text_like(n, d=300, seed=0):
    """Non-negative CSR rows with a zero in every column (so min-max and max-abs scaling
    agree): 8 columns most rows use (the sparse product's dense part), the rest rarely used
    (its inverted index), rows of unequal norms; labels ±1 from a nonlinear rule."""
    rng = np.random.default_rng(seed)
    frequent = sp.random(n, 8, density=0.5, random_state=rng, format="csr",
                         data_rvs=lambda k: rng.uniform(0.1, 2.0, k))
    rare = sp.random(n, d - 8, density=0.03, random_state=rng, format="csr",
                     data_rvs=lambda k: rng.uniform(0.1, 3.0, k))
    X = sp.csr_matrix(sp.diags(rng.uniform(0.5, 2.0, n)) @ sp.hstack([frequent, rare]))
    X.data[X.indptr[0]:X.indptr[1]] = 0.0  # an empty row
    X.eliminate_zeros()
    score = np.asarray(X[:, :4].sum(axis=1)).ravel() - np.asarray(X[:, 8:40].sum(axis=1)).ravel()
    y = np.where(np.abs(score - np.median(score)) < 0.6 * score.std(), 1.0, -1.0)
    return X.tocsr(), y


def reference_kernel(kernel, X, Z):
    """k(X, Z) from dense rows by scipy's distances / numpy products: no GEMM split, no norms."""
    X, Z = np.asarray(X, np.float64), np.asarray(Z, np.float64)
    if kernel.name == "rbf":
        K = np.exp(-kernel.gamma * cdist(X, Z, "sqeuclidean"))
    elif kernel.name == "linear":
        K = X @ Z.T
    else:
        K = (kernel.gamma * (X @ Z.T) + kernel.coef0) ** kernel.degree
    return K + kernel.offset


# ------------------------------------------------------------------------ kernel blocks

@pytest.mark.parametrize("name", ["rbf", "linear", "poly"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_kernel_blocks_equal_the_dense_reference(name, dtype):
    X, _ = text_like(150, seed=1)
    Z, _ = text_like(200, seed=2)
    assert (np.diff(Z[:, :8].tocsc().indptr) >= DENSE_COLUMN_MIN_ROWS).any()  # both parts used
    kernel = Kernel.create(name, gamma=0.05, coef0=1.0, degree=2, offset=0.25)
    expected = reference_kernel(kernel, X.toarray(), Z.toarray())
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    scale = np.abs(expected).max()
    for left, right in ((X, Z), (X, Z.toarray()), (X.toarray(), Z), (X, SparseOperand(Z, dtype))):
        block = kernel.block(left, right, out=np.empty((150, 200), dtype))
        np.testing.assert_allclose(block, expected, rtol=0, atol=tolerance * scale)
    # the rows of Z from 50 on (how the solver fills its upper triangle)
    np.testing.assert_allclose(kernel.block(X, SparseOperand(Z), first_row=50), expected[:, 50:],
                               rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(kernel_matrix(kernel, X, Z, block_mb=0.01), expected, rtol=0,
                               atol=1e-12 * scale)
    coef = np.random.default_rng(3).normal(size=200)
    np.testing.assert_allclose(decision_values(kernel, X, Z, coef), expected @ coef, rtol=1e-10)


def test_products_never_depend_on_the_width():
    """Columns near 2·10^9 cost what small ones do: the operand compacts the columns in use."""
    rng = np.random.default_rng(4)
    columns = np.array([3, 17, 1_234_567, WIDE - 2, WIDE - 1])
    small = sp.random(90, 5, density=0.6, random_state=rng, format="csr")
    small_z = sp.random(70, 5, density=0.6, random_state=rng, format="csr")

    def widen(M):
        return sp.csr_matrix((M.data, columns[M.indices], M.indptr), shape=(M.shape[0], WIDE))

    out = inner_products(widen(small), widen(small_z), np.empty((90, 70)))
    np.testing.assert_allclose(out, small.toarray() @ small_z.toarray().T, rtol=1e-12)
    nothing = sp.csr_matrix((70, WIDE))  # rows without values: every product is 0
    assert not inner_products(widen(small), nothing, np.ones((90, 70))).any()


def test_the_laplacian_kernel_refuses_sparse_rows_naming_the_alternative():
    X, y = text_like(40)
    with pytest.raises(ValueError, match=r"laplacian kernel needs L1 distances.*kernel='rbf'"):
        Kernel.create("laplacian", gamma=0.1).block(X, X)
    with pytest.raises(ValueError, match=r"X is sparse: the laplacian kernel"):
        ODMClassifier(kernel="laplacian").fit(X, y)


# --------------------------------------------------------------- landmarks, strata, scaling

@pytest.mark.parametrize("name", ["rbf", "linear", "poly"])
def test_landmarks_and_strata_of_sparse_rows_are_those_of_dense_rows(name):
    X, _ = text_like(400, seed=5)
    kernel = Kernel.create(name, gamma=0.05, coef0=1.0, degree=2)
    sparse_landmarks = select_landmarks(X, kernel, 12)
    dense_landmarks = select_landmarks(X.toarray(), kernel, 12)
    np.testing.assert_array_equal(sparse_landmarks, dense_landmarks)
    assert np.unique(sparse_landmarks).size == 12
    strata = nearest_landmark(X, X[sparse_landmarks], kernel)
    np.testing.assert_array_equal(strata, nearest_landmark(X.toarray(),
                                                           X.toarray()[dense_landmarks], kernel))
    # Eqn 7 by brute force: the nearest landmark in the RKHS
    K = reference_kernel(kernel, X.toarray(), X.toarray()[sparse_landmarks])
    distances = np.diag(reference_kernel(kernel, X.toarray()[sparse_landmarks],
                                         X.toarray()[sparse_landmarks]))[None, :] - 2 * K
    np.testing.assert_array_equal(strata, np.argmin(distances, axis=1))


def test_sparse_column_statistics_and_max_abs_scaling_keep_zeros():
    X, _ = text_like(300, seed=6)
    X = X.copy()
    X.data[::7] *= -1.0  # some negative values: max-abs and min-max now differ
    dense = ColumnStats(X.toarray())
    halves = ColumnStats.merge(ColumnStats(X[:120]), ColumnStats(X[120:]))
    assert halves.sparse and halves.n == 300 and halves.d == X.shape[1]
    assert halves.variance() == pytest.approx(dense.variance(), rel=1e-12)
    offset, scale, columns = halves.scaling()
    assert offset is None and columns.size == np.unique(X.indices).size
    largest = np.abs(X.toarray()).max(axis=0)
    np.testing.assert_allclose(scale, 1.0 / largest[columns])
    scaled = scale_rows(X, offset, scale, columns)
    assert sp.issparse(scaled) and scaled.nnz == X.nnz  # zeros stay zeros
    assert np.abs(scaled.toarray()).max(axis=0)[columns] == pytest.approx(1.0)
    np.testing.assert_allclose(scale_rows(X.toarray(), offset, scale, columns), scaled.toarray())
    assert halves.variance(offset, scale) == pytest.approx(float(np.var(scaled.toarray())),
                                                           rel=1e-9)
    # held-out rows taken away: the sums of the rest
    rest = halves.without(X[:50])
    assert rest.n == 250 and rest.variance() == pytest.approx(
        ColumnStats(X[50:].toarray()).variance(), rel=1e-9)
    # non-negative columns with a zero each: max-abs is the min-max map
    Y, _ = text_like(300, seed=7)
    low, span_scale = ColumnStats(Y.toarray()).minmax()
    np.testing.assert_allclose(scale_rows(Y, *ColumnStats(Y).scaling()).toarray(),
                               (Y.toarray() - low) * span_scale, atol=1e-15)


# ------------------------------------------------------------------ models: exact and SODM

@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_exact_odm_on_sparse_rows_is_the_dense_fit(kernel):
    X, y = text_like(500, seed=8)
    X_test, _ = text_like(200, seed=9)
    params = dict(kernel=kernel, lam=100.0, tol=1e-8, dtype="float64")
    if kernel == "linear":
        params.update(solver="dcd", fit_intercept=False)
    sparse = ODMClassifier(**params).fit(X, y)
    dense = ODMClassifier(**params).fit(X.toarray(), y)
    assert sp.issparse(sparse.support_vectors_) and not sp.issparse(dense.support_vectors_)
    assert sparse._gamma == pytest.approx(dense._gamma, rel=1e-12)
    np.testing.assert_array_equal(sparse.support_, dense.support_)
    np.testing.assert_allclose(sparse.dual_coef_, dense.dual_coef_, rtol=0,
                               atol=1e-6 * np.abs(dense.dual_coef_).max())
    f = dense.decision_function(X_test.toarray())
    for rows in (X_test, X_test.toarray()):
        np.testing.assert_allclose(sparse.decision_function(rows), f, rtol=0,
                                   atol=1e-6 * np.abs(f).max())


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_sodm_on_sparse_rows_is_the_dense_fit(spark, kernel):
    from sodm_spark.spark.io import numpy_to_blocks
    from sodm_spark.spark.sodm.fit import fit_sodm
    from sodm_spark.spark.sodm.params import SODMParams

    sc = spark.sparkContext
    X, y = text_like(900, seed=10)
    X_test, y_test = text_like(200, seed=11)
    # λ = 100: a diagonal that makes γ well determined, so a stop at tol pins it down
    params = SODMParams(kernel=kernel, lam=100.0, levels=1, strata=4, tol=1e-8, auto_stop=False)
    fits = {}
    for name, rows, test_rows in (("sparse", X, X_test), ("dense", X.toarray(), X_test.toarray())):
        fits[name] = fit_sodm(sc, numpy_to_blocks(sc, rows, y), params, np.array([-1.0, 1.0]),
                              test=(test_rows, y_test))
    sparse, dense = fits["sparse"], fits["dense"]
    assert sp.issparse(sparse.model.support_vectors)
    if kernel == "rbf":  # the max-abs map (the linear kernel's rows are not scaled)
        assert sparse.model.feature_offset is None and sparse.model.feature_columns is not None
    assert sparse.model.kernel.gamma == pytest.approx(dense.model.kernel.gamma, rel=1e-12)
    for a, b in zip(sparse.levels, dense.levels):
        assert (a.level, a.partitions, a.n_sv) == (b.level, b.partitions, b.n_sv)
        assert a.objective == pytest.approx(b.objective, rel=1e-5)
    np.testing.assert_allclose(sparse.model.coef, dense.model.coef, rtol=0,
                               atol=1e-5 * np.abs(dense.model.coef).max())
    f = dense.model.decision_function(X_test.toarray())
    for rows in (X_test, X_test.toarray()):  # the sparse model scores dense rows too
        np.testing.assert_allclose(sparse.model.decision_function(rows), f, rtol=0,
                                   atol=1e-5 * np.abs(f).max())
    assert sparse.test_accuracy == dense.test_accuracy


def test_a_sparse_fit_resumed_from_its_checkpoint_is_the_uninterrupted_fit(spark, tmp_path):
    from dataclasses import replace

    from sodm_spark.spark.io import numpy_to_blocks
    from sodm_spark.spark.sodm.fit import fit_sodm
    from sodm_spark.spark.sodm.params import SODMParams

    sc = spark.sparkContext
    X, y = text_like(600, seed=16)
    params = SODMParams(lam=100.0, levels=1, strata=4, tol=1e-4, auto_stop=False, seed=3)
    whole = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0])
    first = fit_sodm(sc, numpy_to_blocks(sc, X, y), replace(params, stop_level=1), [-1.0, 1.0],
                     checkpoint_dir=tmp_path / "ckpt")  # as if killed before level 0
    assert [entry.level for entry in first.levels] == [1]
    resumed = fit_sodm(sc, numpy_to_blocks(sc, X, y, n_slices=3), params, [-1.0, 1.0],
                       checkpoint_dir=tmp_path / "ckpt", resume=True)
    assert sp.issparse(resumed.model.support_vectors)
    assert (resumed.model.support_vectors != whole.model.support_vectors).nnz == 0
    np.testing.assert_array_equal(resumed.model.coef, whole.model.coef)


def test_sparse_models_compress_among_their_sparse_support_vectors(spark):
    from sodm_spark.spark.io import numpy_to_blocks
    from sodm_spark.spark.sodm.fit import fit_sodm
    from sodm_spark.spark.sodm.params import SODMParams

    X, y = text_like(500, seed=17)
    X_test, y_test = text_like(200, seed=18)
    sparse = ODMClassifier(lam=100.0, dtype="float64").fit(X, y).model_
    dense = ODMClassifier(lam=100.0, dtype="float64").fit(X.toarray(), y).model_
    small = sparse.compress(30, method="landmarks")  # Eqn 8 among the support vectors
    assert sp.issparse(small.support_vectors) and small.support_vectors.shape[0] == 30
    f = dense.compress(30, method="landmarks").decision_function(X_test)
    np.testing.assert_allclose(small.decision_function(X_test), f, rtol=0,
                               atol=1e-6 * np.abs(f).max())
    with pytest.raises(ValueError, match="'kmeans' places its points at k-means centres"):
        sparse.compress(30, method="kmeans")
    # a level compressed in its tasks (level_model.compress_level)
    sc = spark.sparkContext
    params = SODMParams(lam=100.0, levels=1, strata=4, tol=1e-4, auto_stop=False)
    with pytest.raises(ValueError, match="use 'random' or 'landmarks'"):
        fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], max_sv=40,
                 compress_method="kmeans")
    fit = fit_sodm(sc, numpy_to_blocks(sc, X, y), params, [-1.0, 1.0], test=(X_test, y_test),
                   max_sv=40, compress_method="landmarks")
    assert sp.issparse(fit.model.support_vectors) and fit.model.support_vectors.shape[0] == 40
    assert fit.compression["support_vectors_after"] == 40
    report = fit.compression["test"]
    assert report["accuracy_after"] == fit.test_accuracy > 0.5


def test_a_saved_sparse_model_round_trips_and_scores_sparse_and_dense_rows_alike(tmp_path):
    X, y = text_like(300, seed=12)
    X_test, _ = text_like(100, seed=13)
    stats = ColumnStats(X)
    offset, scale, columns = stats.scaling()
    fitted = ODMClassifier(lam=100.0).fit(scale_rows(X, offset, scale, columns), y).model_
    model = KernelExpansion(fitted.support_vectors, fitted.coef, fitted.kernel, fitted.classes,
                            feature_scale=scale, feature_columns=columns)
    f = model.decision_function(X_test)
    model.save(tmp_path / "model")
    folder = model_files(tmp_path / "model")
    with np.load(folder / "arrays.npz", allow_pickle=False) as arrays:  # no pickles
        assert {"sv_data", "sv_indices", "sv_indptr", "sv_shape"} <= set(arrays.files)
        assert "support_vectors" not in arrays.files
    assert json.loads((folder / "metadata.json").read_text())["format_version"] == 3
    loaded = KernelExpansion.load(tmp_path / "model")
    assert sp.issparse(loaded.support_vectors)
    assert (loaded.support_vectors != model.support_vectors).nnz == 0
    np.testing.assert_array_equal(loaded.feature_columns, columns)
    for rows in (X_test, X_test.toarray()):
        np.testing.assert_allclose(loaded.decision_function(rows), f, rtol=1e-12, atol=1e-12)
    # the scorer's files (jobs/predict.py) hold the CSR arrays and score alike, in float32 too
    spec = SupportSet.from_arrays(loaded.support_vectors, loaded.coef, loaded.kernel).save(
        str(tmp_path), prefix="m-")
    support = SupportSet.open(spec, lambda name: str(tmp_path / name))
    inputs = loaded.inputs(X_test)
    for precision in ("float32", "float64"):
        for rows in (inputs, inputs.toarray()):
            scores, _ = support.raw_scores(rows, precision, block_bytes=4096)
            np.testing.assert_allclose(scores[:, 0], f, rtol=0, atol=1e-4 * np.abs(f).max())
    # a dense model still writes the oldest format that holds it
    dense = KernelExpansion(np.ones((2, 3)), np.ones((2, 1)), loaded.kernel, loaded.classes)
    dense.save(tmp_path / "dense")
    assert json.loads((model_files(tmp_path / "dense") / "metadata.json").read_text())[
        "format_version"] == 1


# ------------------------------------------------------------- an index of 2,000,000,000

@pytest.fixture
def wide_files(tmp_path):
    """LIBSVM train and test files whose line 4 holds the feature index 2,000,000,000; the
    test file's line 6 a wider one still (a word no training row has)."""
    X, y = text_like(160, d=40, seed=14)
    X_test, y_test = text_like(60, d=40, seed=15)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=False)
    dump_svmlight_file(X_test, y_test, str(tmp_path / "test.svm"), zero_based=False)
    for name in ("train.svm", "test.svm"):
        lines = (tmp_path / name).read_text().splitlines()
        lines[3] = "1 1:0.5 2000000000:1"
        if name == "test.svm":
            lines[5] = "-1 3:0.25 2000000005:2"
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    return tmp_path


def test_the_job_trains_sparse_rows_with_an_index_of_two_billion(spark, wide_files, capsys):
    out = wide_files / "model"
    assert train_sodm.main(["--kernel", "rbf", "--data", str(wide_files / "train.svm"),
                            "--test-data", str(wide_files / "test.svm"), "--gamma", "1",
                            "--lam", "1e3", "--levels", "1", "--strata", "4",
                            "--model-out", str(out)]) == 0
    assert "left out 1 value in columns beyond the training data's 2,000,000,000" in \
        capsys.readouterr().out
    model = KernelExpansion.load(out)
    assert sp.issparse(model.support_vectors) and model.n_features_in == WIDE
    # nothing in the model is as wide as the features: the scaling is per column in use
    assert model.feature_offset is None and model.feature_scale.size == model.feature_columns.size
    assert WIDE - 1 in model.feature_columns and model.feature_columns.size <= 41
    # jobs/predict.py reads the LIBSVM rows as sparse vectors and scores them as CSR
    assert predict.main(["--model", str(out), "--data", str(wide_files / "test.svm"),
                         "--format", "libsvm", "--out", str(wide_files / "scored")]) == 0
    assert "left out 1 value in columns beyond the model's 2,000,000,000 features" in \
        capsys.readouterr().out
    table = pq.read_table(str(wide_files / "scored")).to_pandas().sort_values("row_id")
    from sodm_spark.spark.io import read_libsvm_local
    X_test, _ = read_libsvm_local(wide_files / "test.svm", sparse=True)
    X_test = X_test[:, :WIDE]  # the unseen word left out, as both jobs do
    np.testing.assert_array_equal(table["prediction"].to_numpy(), model.predict(X_test))
    f = model.decision_function(X_test)
    np.testing.assert_allclose(np.stack(table["rawPrediction"].to_numpy())[:, 1], f, rtol=0,
                               atol=1e-4 * np.abs(model.coef).sum())


def test_rows_that_must_be_dense_refuse_the_index_with_its_file_and_line(spark, wide_files):
    from sodm_spark.spark.io import DataFormatError, read_blocks, read_libsvm_local

    train = str(wide_files / "train.svm")
    with pytest.raises(SystemExit) as raised:  # the laplacian kernel needs dense rows
        train_sodm.main(["--kernel", "laplacian", "--data", train, "--gamma", "1",
                         "--lam", "1e3", "--levels", "1"])
    message = str(raised.value.code)
    assert message.startswith("error: ") and "\n" not in message
    assert f"{train}, line 4: feature index 2,000,000,000" in message
    assert "use --kernel rbf or linear" in message
    for read in (lambda: read_blocks(spark, train, "libsvm", sparse=False),
                 lambda: read_libsvm_local(train)):
        with pytest.raises(DataFormatError, match=r"train\.svm, line 4: feature index "
                                                  r"2,000,000,000 .*read the rows as sparse"):
            read()
    # the density rule keeps these rows sparse
    blocks, d = read_blocks(spark, train, "libsvm", sparse="auto")
    assert d == WIDE and all(sp.issparse(block.X) for block in blocks.collect())


def test_ml_vectors_become_csr_rows_without_densifying():
    """The struct Spark hands an ML-vector column over as: sparse, dense and null vectors, and
    values beyond the model's width (left out and counted)."""
    import pyarrow as pa

    from sodm_spark.spark.io.arrow import vector_rows

    column = pa.StructArray.from_arrays(
        [pa.array([0, 1, None, 0], pa.int8()), pa.array([5, None, None, 9], pa.int32()),
         pa.array([[1, 3], None, None, [0, 7]], pa.list_(pa.int32())),
         pa.array([[0.5, 2.0], [1.0, 0.0, 3.0, 0.0, 4.0], None, [6.0, 8.0]],
                  pa.list_(pa.float64()))],
        names=["type", "size", "indices", "values"],
        mask=pa.array([False, False, True, False]))
    X, sizes, beyond = vector_rows(column, 5)
    assert sp.issparse(X) and X.shape == (4, 5) and beyond == 1
    np.testing.assert_array_equal(sizes, [5, 5, -1, 9])
    np.testing.assert_array_equal(X.toarray(), [[0, 0.5, 0, 2.0, 0], [1.0, 0, 3.0, 0, 4.0],
                                                [0] * 5, [6.0, 0, 0, 0, 0]])
