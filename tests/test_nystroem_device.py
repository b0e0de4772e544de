"""The global step's Nyström ODM (sodm_spark.models.nystroem_odm) on an array namespace: run by
:func:`fit_on_device` on numpy and on ``array_api_strict`` (the array API standard and nothing
more, as a GPU library runs the same code), it is the fit the Spark global step makes from its
partitions' pass sums; with every row a centre it is the exact ODM, the dual solved by
coordinate descent (Wang, Cao, Zhang, Shi & Jin, "Scalable Optimal Margin Distribution
Machine"); row weights are repeated rows."""
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import make_problem

from sodm_spark.core.array_namespace import CPU, ArrayDevice
from sodm_spark.core.kernels import Kernel, kernel_matrix
from sodm_spark.models import nystroem_odm
from sodm_spark.models.nystroem_odm import NystroemFit, PassBlocks, PassLine
from sodm_spark.solvers.odm_dcd import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
from sodm_spark.spark.sodm import global_step

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

STRICT = ArrayDevice("cpu", "array_api_strict")
DEVICES = [pytest.param(CPU, id="numpy"), pytest.param(STRICT, id="array_api_strict")]


def _problem(seed, n=300, d=4, m=30):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y, X[rng.choice(n, m, replace=False)]


def _global_step_fit(kernel, centres, chunks, lam, theta, v, start_values=None):
    """The fit as spark/sodm/global_step.py makes it, without Spark: each pass the sum of its
    blocks' pass sums (its task function; a block is (X, y, weights, ids) as ``pass_rows``
    holds it), the start from a model's values at the centres."""
    basis = nystroem_odm.centre_basis(kernel, centres)
    blocks = [(chunk.X, chunk.y, chunk.weights, np.arange(chunk.y.size)) for chunk in chunks]
    total = sum(chunk.y.size for chunk in chunks)

    def run_pass(coef, direction, steps):
        parts = [global_step._block_sums(block, (centres, coef, direction), steps, theta, v,
                                         kernel) for block in blocks]
        return sum(parts[1:], parts[0])

    start = None
    if start_values is not None:
        start = nystroem_odm.span_start(
            basis, start_values,
            nystroem_odm.loss_weight(lam, theta, total) * total / len(centres))
    return nystroem_odm.fit(basis, run_pass, lam, theta, v, total, start=start)


def _ridge_values(kernel, X, y, centres):
    """Another model of the rows (a kernel ridge regression on all of them) at the centres."""
    ridge = np.linalg.solve(kernel_matrix(kernel, X) + np.eye(len(y)), y)
    return kernel_matrix(kernel, centres, X) @ ridge


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed, lam, theta, v, started", [(0, 1e3, 0.2, 0.3, False),
                                                         (2, 1e4, 0.5, 0.1, False),
                                                         (3, 10.0, 0.1, 0.2, True)])
def test_the_device_fit_is_the_global_steps_fit(device, seed, lam, theta, v, started):
    X, y, centres = _problem(seed)
    kernel = Kernel("rbf", gamma=0.4)
    # the chunks hold float32 rows, and the centres are drawn from them
    rows = X.astype(np.float32)
    centres = centres.astype(np.float32).astype(np.float64)
    chunks = [SimpleNamespace(X=rows[a:b], y=y[a:b], weights=None)
              for a, b in ((0, 120), (120, 121), (121, 300))]
    values = _ridge_values(kernel, rows.astype(np.float64), y, centres) if started else None
    reference, expected = _global_step_fit(kernel, centres, chunks, lam, theta, v, values)
    # blocks of 37 rows, across the chunks' bounds; the arrays on the device beforehand
    coef, report = nystroem_odm.fit_on_device(
        device, kernel, device.asarray(centres), device.asarray(rows), device.asarray(y),
        NystroemFit(lam, theta, v, block_rows=37), start_values=values)
    assert isinstance(coef, np.ndarray) and coef.dtype == np.float64
    np.testing.assert_allclose(coef, reference, rtol=1e-8,
                               atol=1e-8 * np.max(np.abs(reference)))
    assert report.start == expected.start == ("given" if started else "zero")
    assert (report.passes, report.steps, report.reason) == \
        (expected.passes, expected.steps, expected.reason)
    np.testing.assert_allclose(report.objectives, expected.objectives, rtol=1e-10)
    # and the optimum's F, evaluated directly on the device's namespace
    found = nystroem_odm.objective(kernel, device.asarray(centres), device.asarray(coef),
                                   device.asarray(rows.astype(np.float64)), device.asarray(y),
                                   lam, theta, v)
    assert found == pytest.approx(report.objectives[-1], rel=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_the_pass_sums_on_a_namespace_are_their_definition(device):
    X, y, centres = _problem(4, n=200)
    kernel = Kernel("laplacian", gamma=0.5)
    rng = np.random.default_rng(5)
    coef, direction = rng.standard_normal(30) * 0.1, rng.standard_normal(30) * 0.1
    weights = rng.uniform(0.5, 2.0, size=200)
    sums = nystroem_odm.pass_sums(kernel, device.asarray(centres), device.asarray(X),
                                  device.asarray(y), PassLine(device.asarray(coef),
                                                              device.asarray(direction),
                                                              (1.0, 0.5, 0.0)), 0.2, 0.3,
                                  weights=device.asarray(weights),
                                  blocks=PassBlocks(block_rows=64))
    assert type(sums.normal) is type(device.asarray(np.zeros(1)))  # on the device
    losses, normal, target = (device.to_numpy(a) for a in (sums.losses, sums.normal,
                                                           sums.target))
    # row by row, with the host's kernel
    K = kernel_matrix(kernel, X, centres)
    for index, step in enumerate((1.0, 0.5, 0.0)):
        margins = y * (K @ (coef + step * direction))
        below, above = margins < 0.8, margins > 1.2
        loss = weights * (below * (0.8 - margins) ** 2 + 0.3 * above * (margins - 1.2) ** 2)
        assert losses[index] == pytest.approx(np.sum(loss), rel=1e-12)
    margins = y * (K @ (coef + direction))
    weight = weights * np.where(margins < 0.8, 1.0, np.where(margins > 1.2, 0.3, 0.0))
    tau = np.where(margins < 0.8, 0.8, np.where(margins > 1.2, 1.2, 1.0))
    np.testing.assert_allclose(normal, K.T @ (weight[:, None] * K), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(target, K.T @ (weight * y * tau), rtol=1e-10, atol=1e-12)
    last = np.where(y * (K @ coef) < 0.8, 1, np.where(y * (K @ coef) > 1.2, 2, 0))
    first = np.where(margins < 0.8, 1, np.where(margins > 1.2, 2, 0))
    assert sums.changed == np.count_nonzero(first != last) and sums.rows == 200


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lam, theta, v, gamma", [(10.0, 0.2, 0.3, 0.5), (100.0, 0.1, 1.0, 1.0)])
def test_with_every_row_a_centre_the_nystroem_odm_is_the_exact_odm(device, lam, theta, v,
                                                                     gamma):
    X, y = make_problem(m=200, d=3, seed=31)
    kernel = Kernel("rbf", gamma=gamma)
    exact = solve_odm_dual(X, y, kernel, ODMHyperparameters(lam, theta, v),
                           settings=DCDSettings(violation_tol=1e-8, dtype=np.float64,
                                                max_iter=100_000))
    assert exact.converged
    K = kernel_matrix(kernel, X)
    f_exact = K @ (exact.gamma * y)  # f = Σ_i γ_i y_i k(x_i, ·)
    coef, report = nystroem_odm.fit_on_device(device, kernel, X, X, y,
                                              NystroemFit(lam, theta, v))
    assert report.reason.startswith("the jump stayed on its piece")
    np.testing.assert_allclose(K @ coef, f_exact, atol=1e-5 * np.max(np.abs(f_exact)))


@pytest.mark.parametrize("device", DEVICES)
def test_row_weights_on_a_device_are_repeated_rows(device):
    X, y = make_problem(m=80, d=3, seed=6)
    counts = np.random.default_rng(4).integers(1, 4, size=y.size)
    copies = np.repeat(np.arange(y.size), counts)
    kernel = Kernel.create("rbf", 0.7)
    weighted, report = nystroem_odm.fit_on_device(device, kernel, X[:20], X, y,
                                                  NystroemFit(30.0, 0.1, 0.4, block_rows=33),
                                                  weights=counts.astype(float))
    repeated, _ = nystroem_odm.fit_on_device(device, kernel, X[:20], X[copies], y[copies],
                                             NystroemFit(30.0, 0.1, 0.4))
    np.testing.assert_allclose(weighted, repeated, rtol=1e-8, atol=1e-10)
    assert report.reason.startswith("the jump stayed on its piece")


@pytest.mark.parametrize("device", DEVICES)
def test_float32_kernel_blocks_stay_near_the_float64_fit(device):
    # the GPU's choice: kernel blocks in float32, their products and the m × m systems float64
    X, y, centres = _problem(7, n=400, m=40)
    kernel = Kernel("rbf", gamma=0.4)
    exact, _ = nystroem_odm.fit_on_device(device, kernel, centres, X, y,
                                          NystroemFit(1e3, 0.2, 0.3))
    single, report = nystroem_odm.fit_on_device(device, kernel, centres, X, y,
                                                NystroemFit(1e3, 0.2, 0.3,
                                                            kernel_dtype="float32"))
    K = kernel_matrix(kernel, X, centres)
    np.testing.assert_allclose(K @ single, K @ exact, atol=1e-4 * np.max(np.abs(K @ exact)))
    assert report.objectives[-1] == pytest.approx(
        nystroem_odm.objective(kernel, centres, single, X, y, 1e3, 0.2, 0.3), rel=1e-5)


def test_a_start_from_an_earlier_fit_is_taken_and_stays_optimal():
    X, y, centres = _problem(0)
    kernel = Kernel("rbf", gamma=0.4)
    coef, report = nystroem_odm.fit_on_device(CPU, kernel, centres, X, y,
                                              NystroemFit(1e3, 0.2, 0.3))
    again, restarted = nystroem_odm.fit_on_device(CPU, kernel, centres, X, y,
                                                  NystroemFit(1e3, 0.2, 0.3), start_coef=coef)
    assert restarted.start == "given" and restarted.passes <= 3
    assert restarted.objectives[0] == pytest.approx(report.objectives[-1], rel=1e-10)
    assert restarted.objectives[-1] <= report.objectives[-1] * (1 + 1e-12)
    K = kernel_matrix(kernel, X, centres)
    np.testing.assert_allclose(K @ again, K @ coef, atol=1e-8 * np.max(np.abs(K @ coef)))
    with pytest.raises(ValueError, match="at most one start"):
        nystroem_odm.fit_on_device(CPU, kernel, centres, X, y, NystroemFit(1e3, 0.2, 0.3),
                                   start_coef=coef, start_values=np.zeros(len(centres)))
