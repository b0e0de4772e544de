"""The Nyström ODM of the global step (sodm_spark.models.nystroem_odm) against a brute-force
minimization of the same objective, its pass sums, its cost arithmetic and when it runs."""
import numpy as np
import pytest
import scipy.optimize

from sodm_spark.core.kernels import Kernel, kernel_matrix
from sodm_spark.models import nystroem_odm
from sodm_spark.models.nystroem_odm import PassLine
from sodm_spark.spark.sodm.global_plan import (EXPECTED_CG_PASSES, EXPECTED_NORMAL_PASSES,
                                               NORMAL_SECONDS_PER_ENTRY, PASS_OVERHEAD_SECONDS,
                                               plan_global)
from sodm_spark.spark.sodm.global_step import NEAR_MAJORITY, global_step_reason, keeps_global
from sodm_spark.spark.sodm import global_plan

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py


def _problem(seed, n=300, d=4, m=30):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    centres = X[rng.choice(n, m, replace=False)]
    return X, y, centres


def _brute_force(kernel, centres, X, y, lam, theta, v):
    """F's minimum by L-BFGS on α with the exact gradient, to the last digits (F is smooth:
    its pieces meet with equal first derivatives)."""
    K, G = kernel_matrix(kernel, X, centres), kernel_matrix(kernel, centres)
    weight = nystroem_odm.loss_weight(lam, theta, len(y))

    def value_and_gradient(coef):
        margins = y * (K @ coef)
        below = np.maximum(0.0, 1.0 - theta - margins)
        above = np.maximum(0.0, margins - 1.0 - theta)
        value = 0.5 * coef @ G @ coef + weight * np.sum(below ** 2 + v * above ** 2)
        gradient = G @ coef + weight * K.T @ (y * (2.0 * v * above - 2.0 * below))
        return value, gradient

    result = scipy.optimize.minimize(value_and_gradient, np.zeros(len(centres)), jac=True,
                                     method="L-BFGS-B",
                                     options={"maxiter": 100_000, "ftol": 1e-15, "gtol": 1e-11})
    return result.x, result.fun, K


@pytest.mark.parametrize("seed, lam, theta, v", [(0, 1e3, 0.2, 0.3), (1, 1e2, 0.0, 1.0),
                                                 (2, 1e4, 0.5, 0.1), (3, 10.0, 0.1, 0.2)])
def test_newton_reaches_the_brute_force_minimum(seed, lam, theta, v):
    X, y, centres = _problem(seed)
    kernel = Kernel("rbf", gamma=0.4)
    basis = nystroem_odm.centre_basis(kernel, centres)
    coef, report = nystroem_odm.fit(
        basis, lambda c, s, t: nystroem_odm.pass_sums(kernel, centres, X, y, PassLine(c, s, t),
                                                      theta, v),
        lam, theta, v, len(y))
    reference, minimum, K = _brute_force(kernel, centres, X, y, lam, theta, v)
    found = nystroem_odm.objective(kernel, centres, coef, X, y, lam, theta, v)
    assert report.objectives[-1] == pytest.approx(found, rel=1e-12)
    # never above the brute-force minimum by more than its own rounding
    assert found <= minimum * (1 + 1e-9)
    assert minimum <= found * (1 + 1e-6)
    scale = np.max(np.abs(K @ reference))
    np.testing.assert_allclose(K @ coef, K @ reference, atol=1e-4 * scale)
    # a piecewise quadratic: the Newton jumps end on the optimum's own piece in a few passes
    assert report.reason.startswith("the jump stayed on its piece")
    assert report.passes <= 12
    assert all(a >= b for a, b in zip(report.objectives, report.objectives[1:]))


def test_the_pass_sums_add_over_blocks_of_rows():
    X, y, centres = _problem(4, n=200)
    kernel = Kernel("rbf", gamma=0.5)
    rng = np.random.default_rng(5)
    coef, direction = rng.standard_normal(30) * 0.1, rng.standard_normal(30) * 0.1
    steps = (1.0, 0.5, 0.0)
    whole = nystroem_odm.pass_sums(kernel, centres, X, y, PassLine(coef, direction, steps), 0.2,
                                   0.3)
    halves = (nystroem_odm.pass_sums(kernel, centres, X[:77], y[:77],
                                     PassLine(coef, direction, steps), 0.2, 0.3)
              + nystroem_odm.pass_sums(kernel, centres, X[77:], y[77:],
                                       PassLine(coef, direction, steps), 0.2, 0.3))
    np.testing.assert_allclose(halves.losses, whole.losses, rtol=1e-12)
    np.testing.assert_allclose(halves.normal, whole.normal, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(halves.target, whole.target, rtol=1e-12, atol=1e-12)
    assert (halves.changed, halves.rows) == (whole.changed, whole.rows) == (whole.changed, 200)
    # the sums against their definition, row by row
    K = kernel_matrix(kernel, X, centres)
    margins = y * (K @ (coef + direction))
    weight, tau = nystroem_odm.pieces(margins, 0.2, 0.3)
    assert whole.losses[0] == pytest.approx(np.sum(weight * (margins - tau) ** 2), rel=1e-12)
    np.testing.assert_allclose(whole.normal, K.T @ (weight[:, None] * K), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(whole.target, K.T @ (weight * y * tau), rtol=1e-10, atol=1e-12)
    before = nystroem_odm.pieces(y * (K @ coef), 0.2, 0.3)
    assert whole.changed == np.count_nonzero((before[0] != weight) | (before[1] != tau))


def test_the_pieces_of_a_margin():
    weight, tau = nystroem_odm.pieces(np.array([-1.0, 0.79, 0.8, 1.0, 1.2, 1.21]), 0.2, 0.3)
    np.testing.assert_array_equal(weight, [1.0, 1.0, 0.0, 0.0, 0.0, 0.3])
    np.testing.assert_array_equal(tau, [0.8, 0.8, 1.0, 1.0, 1.0, 1.2])


def test_close_centres_leave_a_well_posed_basis():
    X, y, centres = _problem(6)
    centres = np.vstack([centres, centres[:5] + 1e-9])  # five near-duplicates
    basis = nystroem_odm.centre_basis(Kernel("rbf", gamma=0.4), centres)
    gram = kernel_matrix(Kernel("rbf", gamma=0.4), centres)
    assert basis.transform.shape[1] <= 30
    # Tᵀ K_ZZ T is the identity on the kept directions
    np.testing.assert_allclose(basis.transform.T @ gram @ basis.transform,
                               np.eye(basis.transform.shape[1]), atol=1e-6)


def _fixed_speeds(monkeypatch, entry=2e-9, gemm=1e11, memory_mb=8000.0):
    """The plan's measured speeds fixed: ``entry`` seconds a kernel entry of a matrix-free pass
    on one core, ``gemm`` float32 flops a core, ``memory_mb`` available on the driver."""
    monkeypatch.setattr(global_plan, "gemm_flops_per_second", lambda: gemm)
    monkeypatch.setattr(global_plan, "entry_seconds", lambda kernel, inputs: entry)
    monkeypatch.setattr(global_plan, "available_memory_mb", lambda: memory_mb)


def test_the_cost_model_counts_kernel_and_normal_matrix_work(monkeypatch):
    assert nystroem_odm.pass_work(300_000, 1_000, 36) == 300_000 * 1_000 * (36 + 1_000)
    _fixed_speeds(monkeypatch)
    kernel = Kernel("rbf", gamma=0.5)
    # the normal form: EXPECTED_NORMAL_PASSES passes of 2 flops a multiply-add at half the
    # float32 speed on 2 cores (3.108 s), NORMAL_SECONDS_PER_ENTRY a kernel entry (1.5 s) and
    # the fixed cost, and the fit's SETUP_JOBS other jobs
    setup = global_plan.SETUP_JOBS * PASS_OVERHEAD_SECONDS
    normal = EXPECTED_NORMAL_PASSES * (2 * 3.108e11 / (0.5 * 1e11 * 2)
                                       + NORMAL_SECONDS_PER_ENTRY * 1.5e8
                                       + PASS_OVERHEAD_SECONDS) + setup
    assert global_plan.normal_seconds(300_000, 1_000, 36, 2) == pytest.approx(normal)
    # the matrix-free form: EXPECTED_CG_PASSES passes of 3e8 entries at 2 ns over 2 cores
    # (0.3 s) plus the fixed cost, and the m³ factorizations at 0.3 of the GEMM speed
    free = EXPECTED_CG_PASSES * (0.3 + PASS_OVERHEAD_SECONDS) + 1e9 / (0.3 * 1e11 * 2) + setup
    assert global_plan.matrix_free_seconds(300_000, 1_000, 2, 2e-9, EXPECTED_CG_PASSES) == \
        pytest.approx(free)
    # the driver allowed rows of this size
    monkeypatch.setattr(global_plan, "DRIVER_ROWS_BYTES", 300_000 * 168)
    plan = plan_global(300_000, 36, 2, "test", kernel, centres=1_000)
    assert plan.form == "matrix-free" and plan.centres == 1_000
    # chosen at one λ each; the matrix-free fit then planned for two λs of its path
    assert plan.passes == global_plan.PLANNED_PASSES == 2 * EXPECTED_CG_PASSES
    on_executors = free + EXPECTED_CG_PASSES * (0.3 + PASS_OVERHEAD_SECONDS)
    # the rows (300,000 × (4·36 + 24) bytes: float32 inputs, a label, weight and id) fit the
    # driver, where a pass is its 3e8 entries on one core (0.6 s) and no job, and the one
    # other job collects the level's rows (its fixed cost, and their bytes)
    collect = PASS_OVERHEAD_SECONDS + 300_000 * 168 / global_plan.COLLECT_BYTES_PER_SECOND
    on_driver = global_plan.PLANNED_PASSES * 0.6 + 1e9 / (0.3 * 1e11 * 2) + collect
    assert plan.place == "driver" and plan.predicted_seconds == pytest.approx(on_driver)
    assert plan.other_place_seconds == pytest.approx(on_executors)
    assert plan.work_per_pass == 300_000 * 1_000 * 36
    text = plan.describe()
    assert "300,000 rows x 1,000 centres x 36 inputs, matrix-free on the driver" in text
    # rows past DRIVER_ROWS_BYTES run over the executors, whatever the driver would cost
    monkeypatch.setattr(global_plan, "DRIVER_ROWS_BYTES", 300_000 * 168 - 1)
    plan = plan_global(300_000, 36, 2, "test", kernel, centres=1_000)
    assert plan.place == "executors" and plan.other_place_seconds is None
    assert plan.predicted_seconds == pytest.approx(on_executors)
    # a handful of centres: the normal matrix is cheaper than the passes' fixed costs
    assert plan_global(300_000, 36, 2, "test", kernel, centres=20).form == "normal"


def test_a_plan_whose_form_does_not_depend_on_a_kernel_entry_does_not_measure_one(monkeypatch):
    """Measuring a kernel entry compiles the passes' loops (seconds where numba's cache is
    cold); where the matrix-free form's fixed costs alone exceed the normal form's seconds,
    the plan is the normal form without it."""
    _fixed_speeds(monkeypatch)

    def measured(kernel, inputs):
        raise AssertionError("a kernel entry was measured")

    monkeypatch.setattr(global_plan, "entry_seconds", measured)
    kernel = Kernel("rbf", gamma=0.5)
    plan = plan_global(2_711, 10, 2, "test", kernel, budget_seconds=60.0)
    assert plan.form == "normal" and plan.entry_seconds is None and plan.centres == 135
    assert "ns a kernel entry" not in plan.describe()
    # where the forms' seconds are close, the measurement decides
    with pytest.raises(AssertionError, match="a kernel entry was measured"):
        plan_global(300_000, 36, 2, "test", kernel, centres=1_000)


def test_the_plan_takes_the_most_centres_its_budget_holds(monkeypatch):
    _fixed_speeds(monkeypatch)
    kernel = Kernel("rbf", gamma=0.5)
    seconds = {m: global_plan.matrix_free_seconds(2_400_000, m, 2, 2e-9,
                                                  global_plan.PLANNED_PASSES)
               for m in global_plan.CENTRE_LADDER}
    plan = plan_global(2_400_000, 8, 2, "test", kernel, budget_seconds=seconds[5000] + 1.0)
    assert plan.centres == 5000 and plan.form == "matrix-free"
    # the passes the budget holds beside the factorizations, at least the plan's
    per_pass = 2_400_000 * 5000 * 2e-9 / 2 + PASS_OVERHEAD_SECONDS
    factor = 5000 ** 3 / (global_plan.FACTOR_SPEED_SHARE * 1e11 * 2)
    assert plan.passes == min(global_plan.MOST_PASSES, int((seconds[5000] + 1.0 - factor)
                                                            // per_pass))
    assert plan.passes >= global_plan.PLANNED_PASSES
    assert plan.predicted_seconds <= plan.budget_seconds
    # a budget below the ladder's first rung still gets it; the rows cap the centres at one a
    # ROWS_PER_CENTRE rows, and a budget the passes cannot use caps the passes
    assert plan_global(2_400_000, 8, 2, "test", kernel, budget_seconds=1.0).centres == 500
    assert plan_global(3000, 8, 2, "test", kernel, budget_seconds=1e9).centres == 150
    assert plan_global(200_000, 8, 2, "test", kernel, budget_seconds=1e9).centres == 10_000
    assert plan_global(200_000, 8, 2, "test", kernel,
                       budget_seconds=1e9).passes == global_plan.MOST_PASSES
    # the driver's memory caps them: three m × m float64 matrices in half of it
    _fixed_speeds(monkeypatch, memory_mb=1000.0)
    most = global_plan.most_centres_in_memory()
    assert 3 * 8 * most ** 2 <= 0.5 * 1000 * 2**20 * 1.0001
    assert plan_global(2_400_000, 8, 2, "test", kernel, budget_seconds=1e9).centres <= most


def _correct(n, wrong):
    right = np.ones(n, dtype=bool)
    right[list(wrong)] = False
    return right


def test_when_the_global_step_runs():
    near = [_correct(1000, range(241))]  # 0.759 against a majority class of 0.755
    assert "within" in global_step_reason("auto", [3], near, 3, majority_share=0.755)
    assert global_step_reason("auto", [3], near, 3, majority_share=0.755 - NEAR_MAJORITY) is None
    assert global_step_reason("none", [3], near, 3, 0.755) is None
    assert global_step_reason("always", [3], [_correct(1000, [])], 3, 0.5) is not None
    # never after level 0: its one partition is the exact ODM of every row
    assert global_step_reason("always", [1, 0], [near[0], near[0]], 0, 0.755) is None
    # the last merge gained nothing on the slice
    flat = [_correct(1000, range(100)), _correct(1000, range(1, 101))]
    assert "gained nothing" in global_step_reason("auto", [2, 1], flat, 1, 0.5)
    gained = [_correct(1000, range(100)), _correct(1000, range(90))]
    assert global_step_reason("auto", [2, 1], gained, 1, 0.5) is None
    with pytest.raises(ValueError, match="global_step must be one of"):
        global_step_reason("sometimes", [1], near, 1, 0.5)


def test_the_global_model_is_kept_only_where_the_slice_ranks_it_higher():
    level = _correct(100, range(10))
    assert keeps_global(level, _correct(100, range(9)))
    assert not keeps_global(level, _correct(100, range(10)))
    assert not keeps_global(level, _correct(100, range(1, 11)))  # as many right, other rows


@pytest.mark.parametrize("seed, lam, theta, v", [(0, 1e3, 0.2, 0.3), (3, 10.0, 0.1, 0.2)])
def test_a_start_from_another_model_reaches_the_same_minimum(seed, lam, theta, v):
    X, y, centres = _problem(seed)
    kernel = Kernel("rbf", gamma=0.4)
    basis = nystroem_odm.centre_basis(kernel, centres)
    run_pass = lambda c, s, t: nystroem_odm.pass_sums(  # noqa: E731
        kernel, centres, X, y, PassLine(c, s, t), theta, v)
    reference, minimum, K = _brute_force(kernel, centres, X, y, lam, theta, v)
    weight = nystroem_odm.loss_weight(lam, theta, len(y)) * len(y) / len(centres)
    # another model of the rows (a kernel ridge on all of them), seen at the centres only
    ridge = np.linalg.solve(kernel_matrix(kernel, X) + 1.0 * np.eye(len(y)), y)
    values = kernel_matrix(kernel, centres, X) @ ridge
    start = nystroem_odm.span_start(basis, values, weight)
    # the start is the closed-form minimizer of ½‖w‖² + c‖K_ZZ T w − f_Z‖²: its gradient is 0
    image = kernel_matrix(kernel, centres) @ basis.transform
    gradient = start + 2.0 * weight * image.T @ (image @ start - values)
    assert np.max(np.abs(gradient)) <= 1e-8 * max(1.0, np.max(np.abs(start)))
    coef, report = nystroem_odm.fit(basis, run_pass, lam, theta, v, len(y), start=start)
    found = nystroem_odm.objective(kernel, centres, coef, X, y, lam, theta, v)
    assert report.start == "given"  # the ridge's values beat α = 0
    assert found <= minimum * (1 + 1e-9) and minimum <= found * (1 + 1e-6)
    np.testing.assert_allclose(K @ coef, K @ reference, atol=1e-4 * np.max(np.abs(K @ reference)))
    # a start worse than α = 0 is refused: the fit goes on from zero, to the same minimum
    coef, report = nystroem_odm.fit(basis, run_pass, lam, theta, v, len(y), start=-50 * start)
    assert report.start == "zero"
    assert nystroem_odm.objective(kernel, centres, coef, X, y, lam, theta, v) == \
        pytest.approx(found, rel=1e-6)
