"""The device path's numerics on numpy and on array_api_strict (the array API standard and
nothing more): the finite Newton solver against the brute-force dual QP and the numba dual
coordinate descent, the kernel blocks against Kernel.block, and LocalSolve's device path."""
import numpy as np
import pytest
from sklearn.datasets import make_classification

from sodm_spark.core.array_namespace import CPU, ArrayDevice, check_device, resolve_device
from sodm_spark.core.errors import ResourceError, SettingsError
from sodm_spark.core import kernel_blocks
from sodm_spark.core.kernels import Kernel, decision_values, kernel_matrix, kernel_names
from sodm_spark.solvers.local_solve import LocalSolve
from sodm_spark.solvers.odm_dcd import solve_odm_dual
from sodm_spark.solvers.dcd_settings import DCDSettings, ODMHyperparameters
from sodm_spark.solvers.odm_newton import NewtonSettings, solve_odm_newton
from tests.reference import kkt_residual, odm_dual_reference

STRICT = ArrayDevice("cpu", "array_api_strict")
DEVICES = [pytest.param(CPU, id="numpy"), pytest.param(STRICT, id="array_api_strict")]
# every registered kernel (sodm_spark.core.kernels.kernel_names), with the polynomial's
# degree and coef0 and an offset
KERNELS = [Kernel.create(name, 0.2, degree=3, coef0=1.0, offset=0.5) for name in kernel_names()]


def _data(n=300, d=10, seed=0):
    X, y = make_classification(n, d, random_state=seed)
    return X, 2.0 * y - 1.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_kernel_blocks_are_the_kernel_s_blocks(device, kernel):
    rng = np.random.default_rng(0)
    X, Z, coef = rng.normal(size=(50, 7)), rng.normal(size=(30, 7)), rng.normal(size=30)
    on_device = kernel_blocks.kernel_matrix(device, kernel, X, Z, dtype=device.xp.float64)
    np.testing.assert_allclose(device.to_numpy(on_device), kernel_matrix(kernel, X, Z),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        kernel_blocks.decision_values(device, kernel, X, Z, coef, dtype=device.xp.float64),
        decision_values(kernel, X, Z, coef), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("direct_rows", [0, 4000], ids=["cg", "direct"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lam", [10.0, 1e3, 1e5])
def test_newton_solves_the_dual_to_the_brute_force_optimum(device, lam, direct_rows):
    X, y = _data()
    K = kernel_matrix(Kernel("rbf", 0.05), X)
    Q = y[:, None] * K * y[None, :]
    reference_objective, reference_gamma = odm_dual_reference(Q, lam, 0.1, 0.2)
    run = solve_odm_newton(device, device.asarray(K, dtype=device.xp.float64), y, lam, 0.1, 0.2,
                           settings=NewtonSettings(1e-8, rank=50, direct_rows=direct_rows))
    assert run.converged and run.violation <= 1e-8
    assert kkt_residual(Q, run.gamma, lam, 0.1, 0.2) <= 1e-7
    assert run.objective == pytest.approx(reference_objective, rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(run.gamma, reference_gamma, atol=1e-3 * np.abs(
        reference_gamma).max())
    np.testing.assert_allclose(run.u, Q @ run.gamma, atol=1e-10)


@pytest.mark.parametrize("direct_rows", [0, 4000], ids=["cg", "direct"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("lam", [1e3, 1e5, 1e6])
def test_newton_gives_the_numba_solver_s_model(dtype, lam, direct_rows):
    X, y = _data(2000, 20, seed=1)
    kernel = Kernel("rbf", 0.02)
    K = kernel_matrix(kernel, X, dtype=dtype)
    newton = solve_odm_newton(CPU, K, y, lam, 0.1, 0.2, settings=NewtonSettings(
                                  1e-3, rank=200, direct_rows=direct_rows))
    numba = solve_odm_dual(X, y, kernel, ODMHyperparameters(lam, 0.1, 0.2),
                           settings=DCDSettings(violation_tol=1e-3, dtype=dtype))
    # in float64 within the bound; float32 products may end the solve where the active sets
    # cycle (design §2.10), at the same optimum as far as the checks below can tell
    assert newton.converged or dtype == np.float32
    # the same optimum: margins and objectives agree to the bound's order, signs all alike
    assert np.abs(newton.u - numba.u).max() <= 5e-3
    assert abs(newton.objective - numba.objective) <= 1e-5 * abs(numba.objective)
    np.testing.assert_array_equal(np.sign(newton.u), np.sign(numba.u))


def test_weights_are_repeated_rows_and_a_warm_start_is_kept():
    X, y = _data(120, 6, seed=2)
    kernel = Kernel("rbf", 0.1)
    counts = np.random.default_rng(3).integers(1, 4, size=120)
    repeated = np.repeat(np.arange(120), counts)
    K = kernel_matrix(kernel, X)
    weighted = solve_odm_newton(CPU, K, y, 1e3, 0.1, 0.2, weights=counts.astype(float),
                                settings=NewtonSettings(1e-9, rank=120))
    copies = solve_odm_newton(CPU, kernel_matrix(kernel, X[repeated]), y[repeated], 1e3, 0.1,
                              0.2, settings=NewtonSettings(1e-9, rank=400))
    # the copies of a row share its γ: their sum is the weighted row's
    summed = np.bincount(repeated, weights=copies.gamma, minlength=120)
    np.testing.assert_allclose(weighted.gamma, summed, rtol=1e-6, atol=1e-8)
    warm = solve_odm_newton(CPU, K, y, 1e3, 0.1, 0.2, gamma0=weighted.gamma * 0 + summed,
                            weights=counts.astype(float),
                            settings=NewtonSettings(1e-6, rank=120))
    assert warm.n_sweeps == 1 and warm.converged


@pytest.mark.parametrize("n_classes", [0, 3])
def test_local_solve_on_the_cpu_device_is_the_numba_solve(n_classes):
    X, labels = make_classification(600, 8, n_informative=5, n_classes=3, random_state=4)
    y = labels.astype(float) if n_classes else np.where(labels == 0, 1.0, -1.0)
    kernel = Kernel("rbf", 0.05)
    numba = LocalSolve(1e3, 0.1, 0.2, violation_tol=1e-4, dtype="float64").solve(
        X, y, kernel, n_classes, seed=[0, 1])
    device = LocalSolve(1e3, 0.1, 0.2, violation_tol=1e-4, dtype="float64",
                        device="cpu").solve(X, y, kernel, n_classes, seed=[0, 1])
    assert device.gamma.shape == numba.gamma.shape and device.kernel_mode == "resident"
    np.testing.assert_allclose(device.u, numba.u, atol=1e-3)
    assert device.converged


def test_device_settings_and_the_refusal_without_a_gpu(monkeypatch):
    assert check_device("GPU") == "gpu"
    with pytest.raises(SettingsError, match="device must be one of"):
        check_device("tpu")
    assert resolve_device("cpu") is CPU
    monkeypatch.setenv("SODM_GPU_LIBRARY", "no-such-library")
    assert resolve_device("auto") is None  # the numba solvers
    with pytest.raises(ResourceError, match="--device cpu"):
        resolve_device("gpu")
