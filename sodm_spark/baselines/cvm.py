"""CVRRegressor and CVMClassifier: Core Vector Regression / Machine, scikit-learn style (the CVR
paper: Tsang, Kwok & Lai, "Core Vector Regression for Very Large Regression Problems", ICML 2005).

The numerics live in :mod:`sodm_spark.baselines.cvm_solver` (the center-constrained MEB,
Eqns 5-15); this module is their scikit-learn face (docs/design.md §4, "CVR / CVM"), plus the
paper's two regression metrics.
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ..core.estimator_inputs import (check_fit_data, check_predict_data, encode_classes,
                                     keep_params, predict_labels, with_fit_features)
from ..core.kernels import Kernel
from ..core.labels import plus_minus
from ..core.validation import describe_rows, seed_from
from ..models.expansion import KernelExpansion
from .cvm_solver import PROBABILISTIC_SAMPLE, CoreSearch, solve_l2_svm, solve_l2_svr

_SHARED_PARAMETERS = """
    kernel, gamma, degree, coef0 : as in ``ODMClassifier`` (gamma 'scale' = 1/(d·Var X)); any
        kernel of :class:`sodm_spark.core.kernels.Kernel`, laplacian included (Sec. 3.2 lifts the
        constant-k(x,x) condition)
    tol : the MEB tolerance ε: stop when no sampled row lies outside the (1+ε)-ball (the
        paper's ε, 1e-6 in its experiments). It is relative to R² ≈ 2 + 1/C, so the core set
        stops growing with the rows; for CVR it levels off near 1/(ε·(2C+1)) vectors
    max_core : most core vectors (memory: one max_core² float64 matrix, 200 MB at 5000);
        reaching it stops the growth with a ConvergenceWarning
    points_per_iter : 59-row samples drawn per iteration, each adding its furthest row. 1 is
        the paper's loop; b > 1 draws the same one-sample-per-point and stops at the first
        clean sample, but re-solves the core QP once per b points (its cost is O(|core|²))
    sample_size : rows per sample (59: the best of 59 is among the furthest 5% w.p. 0.95)
    final_check : 'sample' (the paper: stop at the first sample with no row outside the
        (1+ε)-ball) or 'full' (then also scan every row, in kernel blocks, and continue from
        the furthest one outside; this makes Property 3's (1+ε)² bound certain)
    random_state : int seed of the samples (None means 0)
"""



def _check_positive(name, value, integer=False, minimum=0.0):
    kind = numbers.Integral if integer else numbers.Real
    if not (isinstance(value, kind) and not isinstance(value, bool) and np.isfinite(value)
            and value > minimum):
        what = "an integer" if integer else "a finite number"
        raise ValueError(f"{name} must be {what} > {minimum:g}, got {value!r}.")


class _CoreVectorBase(BaseEstimator):
    def _check_common(self):
        _check_positive("C", self.C)
        _check_positive("tol", self.tol)
        _check_positive("max_core", self.max_core, integer=True, minimum=1)
        _check_positive("points_per_iter", self.points_per_iter, integer=True)
        _check_positive("sample_size", self.sample_size, integer=True)
        if self.final_check not in ("sample", "full"):
            raise ValueError(f"final_check must be 'sample' or 'full', got {self.final_check!r}.")

    def _core_search(self) -> CoreSearch:
        return CoreSearch(tol=self.tol, max_core=self.max_core, n_samples=self.sample_size,
                          points_per_iter=self.points_per_iter, final_check=self.final_check,
                          seed=seed_from(self.random_state))

    def _store(self, X, solutions, coef_scale, intercepts, classes):
        """One output per solution; outputs share the union of their support vectors."""
        self.core_indices_ = np.unique(np.concatenate([s.core_rows for s in solutions]))
        self.support_ = np.unique(np.concatenate([s.support_rows for s in solutions]))
        coef = np.zeros((self.support_.size, len(solutions)))
        for output, solution in enumerate(solutions):
            coef[np.searchsorted(self.support_, solution.support_rows), output] = \
                coef_scale * solution.coef
        self.support_vectors_ = X[self.support_]
        self.dual_coef_ = coef.T
        single = len(solutions) == 1
        self.intercept_ = float(intercepts[0]) if single else np.asarray(intercepts, float)
        self.model_ = with_fit_features(self, KernelExpansion(
            self.support_vectors_, coef, self.kernel_, classes,
            np.atleast_1d(np.asarray(intercepts, dtype=float))))
        radii = [float(np.sqrt(s.meb.radius2)) for s in solutions]
        self.radius_ = radii[0] if single else np.asarray(radii)
        self.n_iter_ = np.asarray([s.meb.n_iter for s in solutions])
        self.converged_ = all(s.meb.converged for s in solutions)
        if not self.converged_:
            warnings.warn(
                f"{type(self).__name__} stopped at max_core={self.max_core} core vectors with "
                f"rows still outside the (1+tol)-ball; raise max_core or tol.",
                ConvergenceWarning)

    @property
    def n_core_(self) -> int:
        check_is_fitted(self)
        return int(self.core_indices_.size)

    def _decision(self, X):
        X = check_predict_data(self, X)
        return self.model_.decision_function(X)  # the expansion carries the intercept


class CVRRegressor(RegressorMixin, _CoreVectorBase):
    """L2-SVR trained as a center-constrained minimum enclosing ball: Core Vector Regression.

    Solves the paper's primal (Eqn 6) on standardized targets ``(y - mean) / std``:
    ``min ½‖w‖² + ½b² + C·Σ_i ½(ξ_i² + ξ_i*²) + C·μ·m·ε̄``, i.e. the paper's
    ``C_paper = C·μ·m``; C is the per-row weight of the squared slack, as scikit-learn's SVR
    weighs its loss. The tube half-width ε̄ is learned (Eqn 10), μ sets it: at the optimum
    ``Σ(ξ + ξ*) = μ·m`` (Eqn 9), the mean slack. A fixed-ε tube has no simplex constraint and
    so no MEB form, which is why there is ``mu`` and no ``epsilon``. Predictions are mapped
    back to the original units; ``dual_coef_`` and ``intercept_`` are in those units too.

    Parameters
    ----------
    C : per-row weight of ½(ξ² + ξ*²) on the standardized targets
    mu : μ > 0 of Eqn 6 (the mean slack in standardized units; smaller μ, wider tube), or
        'auto': ``min(0.1, 0.3·max_core/m)``. Why: by Eqn 9 a core vector carries slack
        ``ξ_p = μ·m·α_p`` and Σα = 1, so with far fewer core vectors than rows the whole
        budget μ·m sits on the core; 'auto' keeps its mean near 0.3 (standardized units) once
        the core is full, and μ = 0.1 while the core can hold the support vectors. On
        Friedman #1 (3k-100k rows) its test RMSE was within about 1% of the best μ tried
    SHARED_PARAMETERS
    Attributes
    ----------
    core_indices_, n_core_ : rows of X in the final core set, their number
    support_, support_vectors_, dual_coef_ : rows with a non-zero coefficient, their features,
        and ``f(x) = Σ dual_coef_ · k(sv, x) + intercept_`` (shape (1, n_SV) as in SVR)
    intercept_ : float, the penalized bias b of Eqn 9 plus the target mean; ``model_`` (a
        :class:`KernelExpansion`, saved as arrays + JSON) carries it, so its predictions are
        the regressor's
    epsilon_ : the learned ε̄ of Eqn 10 in target units (negative when μ forces every core
        row to carry slack)
    mu_ : the μ used (resolved from 'auto')
    radius_, n_iter_, converged_ : final MEB radius R, core-set iterations (an array, one
        per output), whether the stopping test was met before max_core
    """

    def __init__(self, kernel="rbf", gamma="scale", degree=3, coef0=0.0, C=30.0, mu="auto",
                 tol=3e-6, max_core=5000, points_per_iter=16, sample_size=PROBABILISTIC_SAMPLE,
                 final_check="sample", random_state=None):
        keep_params(self, locals())

    def fit(self, X, y):
        X, y = check_fit_data(self, X, y, regression=True)
        if X.shape[0] < 2:
            raise ValueError(f"CVRRegressor needs at least 2 rows, got n_samples={X.shape[0]}.")
        self._check_common()
        if isinstance(self.mu, str) and self.mu == "auto":
            self.mu_ = min(0.1, 0.3 * self.max_core / X.shape[0])
        else:
            _check_positive("mu", self.mu)
            self.mu_ = float(self.mu)
        self.kernel_ = Kernel.create(self.kernel, self.gamma, self.degree, self.coef0, X)
        self.y_mean_ = float(y.mean())
        self.y_scale_ = float(y.std()) or 1.0  # a constant target stays constant
        solution = solve_l2_svr(X, (y - self.y_mean_) / self.y_scale_, self.kernel_, C=self.C,
                                mu=self.mu_, search=self._core_search())
        self._store(X, [solution], self.y_scale_,
                    [self.y_mean_ + self.y_scale_ * solution.intercept], np.arange(0))
        self.epsilon_ = self.y_scale_ * solution.margin
        return self

    def predict(self, X):
        return self._decision(X)


class CVMClassifier(ClassifierMixin, _CoreVectorBase):
    """Two-class L2-SVM trained as a minimum enclosing ball: the Core Vector Machine (Eqn 5).

    Solves ``min ‖w‖² + b² - 2ρ + C·Σ_i ξ_i²`` s.t. ``y_i(wᵀφ(x_i) + b) ≥ ρ - ξ_i`` through
    its dual ``max -αᵀK̃α`` on the simplex with ``k̃ = y_i y_j (k + 1) + δ_ij/C``; kernels
    without a constant k(x,x) use the Δ/η of Sec. 3.2. Labels may be any two values
    (``classes_[1]`` scores positive); more classes are fitted one-vs-rest (one MEB each).

    Parameters
    ----------
    C : weight of the squared slacks ξ_i²
    SHARED_PARAMETERS
    Attributes
    ----------
    core_indices_, n_core_, support_, support_vectors_, dual_coef_, intercept_, model_,
    radius_, n_iter_, converged_ : as in :class:`CVRRegressor` (``dual_coef_`` = α_i y_i,
    ``intercept_`` = b = Σ α_i y_i); one row / entry per class with one-vs-rest
    rho_ : the margin ρ = αᵀK̃α (per class with one-vs-rest)
    """

    def __init__(self, kernel="rbf", gamma="scale", degree=3, coef0=0.0, C=10.0, tol=1e-5,
                 max_core=5000, points_per_iter=16, sample_size=PROBABILISTIC_SAMPLE,
                 final_check="sample", random_state=None):
        keep_params(self, locals())

    def fit(self, X, y):
        X, y = check_fit_data(self, X, y)
        self._check_common()
        y_index = encode_classes(self, y)
        self.kernel_ = Kernel.create(self.kernel, self.gamma, self.degree, self.coef0, X)
        # Binary: one MEB with classes_[1] as +1. More classes: one-vs-rest, one MEB each.
        targets = [1] if self.classes_.size == 2 else range(self.classes_.size)
        solutions = [solve_l2_svm(X, plus_minus(y_index, target), self.kernel_,
                                  C=self.C, search=self._core_search()) for target in targets]
        self._store(X, solutions, 1.0, [s.intercept for s in solutions], self.classes_)
        rhos = [s.margin for s in solutions]
        self.rho_ = rhos[0] if len(rhos) == 1 else np.asarray(rhos)
        return self

    def decision_function(self, X):
        """``f(x) = Σ α_i y_i k(x_i, x) + b``: (n,) for two classes (positive scores
        ``classes_[1]``), (n, n_classes) one-vs-rest otherwise."""
        return self._decision(X)

    def predict(self, X):
        return predict_labels(self, X)


def _paired_targets(y, pred):
    y, pred = np.asarray(y, dtype=np.float64).ravel(), np.asarray(pred, dtype=np.float64).ravel()
    if y.shape != pred.shape or y.size == 0:
        raise ValueError(f"y and pred must be non-empty and of one length, got {y.size} and "
                         f"{pred.size} values.")
    bad = np.flatnonzero(~(np.isfinite(y) & np.isfinite(pred)))
    if bad.size:
        raise ValueError(f"y or pred is NaN or infinite in {describe_rows(bad)} (0-based).")
    return y, pred


def rmse_over_max(y, pred) -> float:
    """The CVR paper's "RMSE" (its footnote 10): ``sqrt(mean((f(x_i) - y_i)²)) / max_i |y_i|``.

    The paper divides by ``max_i y_i``; ``max |y_i|`` is the same whenever the largest
    magnitude is positive (every data set there) and stays positive for any sign of targets.
    """
    y, pred = _paired_targets(y, pred)
    scale = np.abs(y).max()
    if scale == 0.0:
        raise ValueError("rmse_over_max is undefined when every target is 0.")
    return float(np.sqrt(np.mean((pred - y) ** 2)) / scale)


def mean_relative_error(y, pred) -> float:
    """The CVR paper's MRE (its footnote 10): ``mean_i |(f(x_i) - y_i) / y_i|``."""
    y, pred = _paired_targets(y, pred)
    zero = np.flatnonzero(y == 0.0)
    if zero.size:
        raise ValueError(f"mean_relative_error divides by y, which is 0 in "
                         f"{describe_rows(zero)} (0-based); drop those rows or use RMSE.")
    return float(np.mean(np.abs((pred - y) / y)))


for _estimator in (CVRRegressor, CVMClassifier):  # one copy of the shared parameter docs
    assert _estimator.__doc__ is not None  # both classes have a docstring
    _estimator.__doc__ = _estimator.__doc__.replace("    SHARED_PARAMETERS\n",
                                                    _SHARED_PARAMETERS.lstrip("\n") + "\n")
