"""The matrix-free Nyström ODM of the global step (sodm_spark.models.nystroem_cg and its row
passes, sodm_spark.models.nystroem_passes and sodm_spark.solvers.kernel_products) against dense
float64 sums, a brute-force minimization of the same objective and the normal-matrix form."""
import numpy as np
import pytest
import scipy.optimize

from sodm_spark.core.kernels import Kernel, kernel_matrix
from sodm_spark.models import nystroem_cg, nystroem_odm
from sodm_spark.models.nystroem_passes import RowPasses, fused
from sodm_spark.solvers import kernel_products

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

THETA, V = 0.1, 0.2


def _problem(seed, n=1200, d=5, m=60):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y, X[rng.choice(n, m, replace=False)]


def _dense_sums(kernel, X, y, weights, centres, coef, direction, steps):
    """The line's and the Hessian's sums from the whole float64 kernel (module docstrings)."""
    K = kernel_matrix(kernel, X, centres, dtype=np.float64)
    s = np.ones(len(y)) if weights is None else weights
    losses, gradients, active = [], [], []
    for t in steps:
        margins = y * (K @ (coef + t * direction))
        D, tau = nystroem_odm.pieces(margins, THETA, V)
        losses.append(np.sum(s * D * (margins - tau) ** 2))
        gradients.append(K.T @ (s * D * (margins - tau) * y))
        active.append(np.sum(s * D))
    D = nystroem_odm.pieces(y * (K @ coef), THETA, V)[0]
    return (np.array(losses), np.array(gradients), np.array(active),
            K.T @ (s * D * (K @ direction)), np.sum(s * D))


@pytest.mark.parametrize("d, weighted", [(5, False), (13, True)])
def test_the_fused_sums_are_the_dense_kernels_sums(d, weighted):
    X, y, centres = _problem(1, d=d)
    rng = np.random.default_rng(2)
    weights = rng.uniform(0.5, 2.0, len(y)) if weighted else None
    kernel = Kernel("rbf", gamma=0.2)
    coef, direction = rng.normal(size=60) * 0.05, rng.normal(size=60) * 0.05
    steps = (1.0, 0.5, 0.0)
    passes = RowPasses(kernel, centres, X, y, weights, THETA, V, threads=2)
    assert fused(kernel, X)
    line, hessian = passes.line(coef, direction, steps), passes.hessian(coef, direction)
    losses, gradients, active, products, weight = _dense_sums(kernel, X, y, weights, centres,
                                                              coef, direction, steps)
    # float32 kernel entries (and exponentials within 4e-6 of float64's), float64 sums
    np.testing.assert_allclose(line.losses, losses, rtol=2e-5)
    np.testing.assert_allclose(line.gradients, gradients, rtol=2e-5,
                               atol=2e-5 * np.abs(gradients).max())
    np.testing.assert_allclose(line.active, active, rtol=1e-12)
    np.testing.assert_allclose(hessian.products, products, rtol=2e-5,
                               atol=2e-5 * np.abs(products).max())
    assert hessian.active == pytest.approx(weight, rel=1e-12)
    assert line.rows == len(y)


def test_the_fused_exponential_is_within_its_bound():
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 3, (200, 8))
    centres = rng.uniform(0, 3, (500, 8))
    kernel = Kernel("rbf", gamma=1.7)
    exact = kernel_matrix(kernel, X, centres, dtype=np.float64)
    rows = kernel_products.rows_record(X, np.ones(200), None)
    record = kernel_products.centres_record(centres, kernel.gamma)
    buf, bits = np.empty(500, dtype=np.float32), np.empty(500, dtype=np.int32)
    for i in range(200):
        kernel_products._kernel_row(rows.X[i], rows.x_sq[i], record.ZT, record.z_sq,
                                    record.gamma, record.offset, buf, bits)
        # 4e-6 relative from the polynomial and float32's rounding of the exponent, plus the
        # float32 distances' absolute error near 1
        np.testing.assert_allclose(buf, exact[i], rtol=1e-5, atol=1e-6)


def test_the_gemm_path_and_block_sums_agree_with_the_fused_loops():
    X, y, centres = _problem(4)
    kernel = Kernel("rbf", gamma=0.3)
    rng = np.random.default_rng(5)
    coef, direction = rng.normal(size=60) * 0.05, rng.normal(size=60) * 0.05
    whole = RowPasses(kernel, centres, X, y, None, THETA, V)
    gemm = RowPasses(kernel, centres, X, y, None, THETA, V, block_rows=97)
    gemm._fused = False
    halves = [RowPasses(kernel, centres, X[part], y[part], None, THETA, V)
              for part in (slice(0, 500), slice(500, None))]
    expected = whole.line(coef, direction, (1.0, 0.0))
    for line in (gemm.line(coef, direction, (1.0, 0.0)),
                 halves[0].line(coef, direction, (1.0, 0.0)) +
                 halves[1].line(coef, direction, (1.0, 0.0))):
        np.testing.assert_allclose(line.losses, expected.losses, rtol=2e-5)
        np.testing.assert_allclose(line.gradients, expected.gradients, rtol=2e-5,
                                   atol=2e-5 * np.abs(expected.gradients).max())
        assert line.rows == len(y)
    summed = halves[0].hessian(coef, direction) + halves[1].hessian(coef, direction)
    np.testing.assert_allclose(summed.products, whole.hessian(coef, direction).products,
                               rtol=2e-5, atol=1e-6)


def _brute_force(kernel, centres, X, y, lam, jitter, weights=None):
    """F's minimum (the penalty with the fit's jitter) by L-BFGS with the exact gradient."""
    K = kernel_matrix(kernel, X, centres, dtype=np.float64)
    G = kernel_matrix(kernel, centres, dtype=np.float64) + jitter * np.eye(len(centres))
    s = np.ones(len(y)) if weights is None else weights
    weight = nystroem_odm.loss_weight(lam, THETA, s.sum())

    def value_and_gradient(alpha):
        margins = y * (K @ alpha)
        D, tau = nystroem_odm.pieces(margins, THETA, V)
        residual = s * D * (margins - tau)
        return (0.5 * alpha @ G @ alpha + weight * residual @ (margins - tau),
                G @ alpha + 2 * weight * K.T @ (residual * y))

    found = scipy.optimize.minimize(value_and_gradient, np.zeros(len(centres)), jac=True,
                                    method="L-BFGS-B",
                                    options={"maxiter": 50_000, "ftol": 1e-15, "gtol": 1e-11})
    return found.fun, value_and_gradient


@pytest.mark.parametrize("seed, lam", [(0, 1e3), (6, 30.0)])
def test_the_matrix_free_fit_reaches_the_brute_force_minimum(seed, lam):
    X, y, centres = _problem(seed, n=900, m=50)
    kernel = Kernel("rbf", gamma=0.3)
    passes = RowPasses(kernel, centres, X, y, None, THETA, V, threads=2)
    alpha, report = nystroem_cg.fit(kernel, centres, passes,
                                    nystroem_cg.Problem(lam, THETA, V, len(y)),
                                    nystroem_cg.NewtonCGSettings(relative_decrease=1e-12))
    best, objective = _brute_force(kernel, centres, X, y, lam, report.jitter)
    # float32 kernel entries in the passes: F within their first-order effect
    assert objective(alpha)[0] == pytest.approx(best, rel=1e-6)
    assert report.objectives[-1] == pytest.approx(objective(alpha)[0], rel=1e-5)
    assert report.objectives == sorted(report.objectives, reverse=True)  # F only decreases
    # the start's pass, each step's CG products and line search, and those of a last jump
    # that decreased nothing, if one did
    taken = 1 + sum(step["cg"] + 1 for step in report.steps)
    assert taken <= report.passes <= taken + nystroem_cg.MAX_CG + 1
    # the normal-matrix form of the same problem predicts the same signs
    basis = nystroem_odm.centre_basis(kernel, centres)
    normal, _ = nystroem_odm.fit(basis, lambda coef, direction, steps: nystroem_odm.pass_sums(
        kernel, centres, X, y, nystroem_odm.PassLine(coef, direction, steps), THETA, V),
        lam, THETA, V, len(y))
    K = kernel_matrix(kernel, X, centres)
    assert np.mean(np.sign(K @ alpha) == np.sign(K @ normal)) >= 0.998


def test_integer_weights_are_repeated_rows():
    X, y, centres = _problem(7, n=400, m=30)
    kernel = Kernel("rbf", gamma=0.3)
    counts = np.random.default_rng(8).integers(1, 4, len(y))
    settings = nystroem_cg.NewtonCGSettings(relative_decrease=1e-12)
    weighted, report = nystroem_cg.fit(kernel, centres, RowPasses(
        kernel, centres, X, y, counts.astype(float), THETA, V),
        nystroem_cg.Problem(100.0, THETA, V, counts.sum()), settings)
    repeated, _ = nystroem_cg.fit(kernel, centres, RowPasses(
        kernel, centres, np.repeat(X, counts, axis=0), np.repeat(y, counts), None, THETA, V),
        nystroem_cg.Problem(100.0, THETA, V, counts.sum()), settings)
    best, objective = _brute_force(kernel, centres, X, y, 100.0, report.jitter,
                                   counts.astype(float))
    # both at the weighted problem's minimum, to the float32 passes' first-order effect, and
    # the same function there (F is strongly convex in f on the rows it charges)
    assert objective(weighted)[0] == pytest.approx(best, rel=1e-6)
    assert objective(repeated)[0] == pytest.approx(best, rel=1e-6)
    K = kernel_matrix(kernel, X, centres)
    assert np.max(np.abs(K @ weighted - K @ repeated)) <= 1e-3 * np.max(np.abs(K @ weighted))


def test_a_start_from_another_model_and_the_pass_budget():
    X, y, centres = _problem(9, n=900, m=50)
    kernel = Kernel("rbf", gamma=0.3)
    passes = RowPasses(kernel, centres, X, y, None, THETA, V)
    problem = nystroem_cg.Problem(1e3, THETA, V, len(y))
    settings = nystroem_cg.NewtonCGSettings(relative_decrease=1e-12)
    alpha, report = nystroem_cg.fit(kernel, centres, passes, problem, settings)
    # started from the optimum's own values at the centres: taken, and the same minimum
    values = kernel_matrix(kernel, centres, dtype=np.float64) @ alpha
    again, started = nystroem_cg.fit(kernel, centres, passes, problem, settings,
                                     start_values=values)
    assert started.start == "given"
    assert started.objectives[0] < report.objectives[0]
    assert started.objectives[-1] == pytest.approx(report.objectives[-1], rel=1e-6)
    # a start far worse than α = 0 is not taken
    _, refused = nystroem_cg.fit(kernel, centres, passes, problem, settings,
                                 start_values=-50.0 * values)
    assert refused.start == "zero"
    # at most the budget's passes, the objective still only decreasing
    _, short = nystroem_cg.fit(kernel, centres, passes, problem,
                               nystroem_cg.NewtonCGSettings(max_passes=7))
    assert short.passes <= 7 and "pass budget" in short.reason
    assert short.objectives[-1] < short.objectives[0]


def test_the_passes_run_on_the_array_standard_alone():
    xp = pytest.importorskip("array_api_strict")
    X, y, centres = _problem(10, n=300, m=20)
    kernel = Kernel("rbf", gamma=0.3)
    rng = np.random.default_rng(11)
    coef, direction = rng.normal(size=20) * 0.1, rng.normal(size=20) * 0.1
    strict = RowPasses(kernel, centres, xp.asarray(X), xp.asarray(y), None, THETA, V,
                       block_rows=64)
    assert not fused(kernel, strict.X)
    expected = RowPasses(kernel, centres, X, y, None, THETA, V)
    np.testing.assert_allclose(strict.line(coef, direction, (1.0, 0.5)).gradients,
                               expected.line(coef, direction, (1.0, 0.5)).gradients,
                               rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(strict.hessian(coef, direction).products,
                               expected.hessian(coef, direction).products, rtol=2e-5, atol=1e-6)


def test_the_lambda_path_keeps_the_lambda_the_held_out_rows_rank_first():
    X, y, centres = _problem(11, n=900, m=50)
    X_val, y_val, _ = _problem(12, n=600, m=1)
    kernel = Kernel("rbf", gamma=0.3)
    passes = RowPasses(kernel, centres, X, y, None, THETA, V)
    problem = nystroem_cg.Problem(10.0, THETA, V, len(y))
    settings = nystroem_cg.NewtonCGSettings(relative_decrease=1e-12)
    K_val = kernel_matrix(kernel, X_val, centres, dtype=np.float64)

    def judge(alpha):
        return np.sign(K_val @ alpha) == y_val

    def more_right(best, new):
        return int(new.sum()) > int(best.sum())

    alpha, path = nystroem_cg.fit_path(kernel, centres, passes, problem, judge, more_right,
                                       settings, factors=(1.0, 10.0, 100.0, 1000.0))
    # each λ reaches its own minimum (warm-started from the previous λ's α): the brute force
    # at the λ kept
    lam = path.lams[path.chosen]
    best, objective = _brute_force(kernel, centres, X, y, lam, path.reports[0].jitter)
    assert objective(alpha)[0] == pytest.approx(best, rel=1e-6)
    # the λ kept ranks first among those tried, and the path stopped at the first λ that did
    # not rank above the best so far, or ran them all
    accuracies = [int(judged.sum()) for judged in path.judged]
    assert accuracies[path.chosen] == max(accuracies)
    assert path.lams == [10.0 * f for f in (1.0, 10.0, 100.0, 1000.0)][:len(path.lams)]
    if len(path.lams) < 4:
        assert accuracies[-1] <= max(accuracies[:-1]) and "did not rank above" in path.reason
    assert all(accuracies[i] > max(accuracies[:i]) for i in range(1, len(accuracies) - 1))
    assert path.passes == sum(report.passes for report in path.reports)
    # a judge that ranks every λ higher walks the whole path; a pass budget is shared out
    # and never exceeded
    _, walked = nystroem_cg.fit_path(kernel, centres, passes, problem, judge,
                                     lambda best, new: True, settings)
    assert walked.lams == [10.0 * f for f in nystroem_cg.PATH_FACTORS]
    assert walked.chosen == len(nystroem_cg.PATH_FACTORS) - 1
    _, short = nystroem_cg.fit_path(kernel, centres, passes, problem, judge,
                                    lambda best, new: True,
                                    nystroem_cg.NewtonCGSettings(max_passes=12))
    assert short.passes <= 12 and short.reports[0].passes <= 12 // len(nystroem_cg.PATH_FACTORS)
    # a judge that never ranks a later λ higher keeps the first
    first, kept = nystroem_cg.fit_path(kernel, centres, passes, problem, judge,
                                       lambda best, new: False, settings)
    assert kept.chosen == 0 and len(kept.lams) == 2
    alone, _ = nystroem_cg.fit(kernel, centres, passes, problem, settings)
    np.testing.assert_allclose(first, alone)
