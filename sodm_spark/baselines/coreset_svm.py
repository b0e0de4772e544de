"""CoresetSVMClassifier: an SVM trained on a sensitivity coreset (the coreset SVM paper, "Small
Coresets to Represent Large Training Data for Support Vector Machines", Algorithm 1).

The numerics live in :mod:`sodm_spark.baselines.coreset_svm_solver`; this module is their
scikit-learn face (docs/design.md §4, "Coreset SVM").
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning

from ..core.estimator_inputs import (check_fit_data, check_predict_data, encode_classes,
                                     keep_params, predict_labels, with_fit_features)
from ..core.kernels import Kernel
from ..core.labels import plus_minus
from ..core.validation import seed_from
from ..models.expansion import KernelExpansion
from .coreset_svm_solver import (BOUNDS, ReductionSettings, build_coreset, check_weighted_data,
                                 merge_and_reduce, sample_coreset, sensitivity_bounds,
                                 solve_weighted_svm)

SUPPORTED_KERNELS = ("linear", "rbf", "poly")


def sample_size_bound(total_sensitivity, dimension: int, epsilon, delta) -> int:
    """Theorem 9's ``m = t/ε² · (d log t + log(1/δ))`` with the hidden Ω constant set to 1."""
    if not all(isinstance(v, numbers.Real) and 0.0 < float(v) < 1.0 for v in (epsilon, delta)):
        raise ValueError(f"epsilon and delta must lie in (0, 1), got {epsilon!r}, {delta!r}.")
    t = max(float(total_sensitivity), 1.0)
    return max(1, math.ceil(t / epsilon**2 * (dimension * math.log(t) + math.log(1 / delta))))


class CoresetSVMClassifier(ClassifierMixin, BaseEstimator):
    """Soft-margin SVM fitted on a weighted sensitivity coreset of the training rows.

    Fitting builds a coreset ``(S, v)`` by Algorithm 1 of the coreset SVM paper (sensitivity
    bounds of Eqn 5 from the exact SVM on the data, ``coreset_size`` multinomial draws, weights
    ``t·K_i·u_i/(γ_i·m)``) and then solves, exactly (libsvm), the paper's SVM (Eqn 2) on it::

        min_{w, b}  ½‖w‖² + C · Σ_{i∈S} v_i · max(0, 1 - y_i (wᵀx_i + b))

    With ``chunk_size`` the rows are shuffled, cut into chunks, one coreset is built per chunk
    and the coresets are merged and reduced pairwise (Sec. 4.2), so that the exact solve of
    Algorithm 1 line 1 only ever sees ``chunk_size`` (or ``2·coreset_size``) rows.

    Parameters
    ----------
    coreset_size : number of draws m (the coreset holds at most m distinct rows), or None to
        take Theorem 9's ``t/ε²·(d log t + log 1/δ)`` (hidden constant 1; linear kernel and
        ``chunk_size=None`` only; capped at the number of rows)
    C : the paper's C > 0 in Eqn 2 (the same as scikit-learn SVC's C; the paper's analysis
        takes C ≤ 1 and points with ‖x‖ ≤ 1, under which small coresets are guaranteed)
    kernel : 'linear' (the paper's setting), 'rbf' or 'poly' (Eqn 5 applied in the RKHS)
    gamma, degree, coef0 : kernel parameters as in ``ODMClassifier``
    epsilon, delta : accuracy and failure probability of Theorem 9, used only when
        ``coreset_size`` is None
    bound : 'lemma7' (Eqn 5, Algorithm 1) or 'lemma11' (approximate-solution bound, ξ = the
        solver's duality gap)
    chunk_size : rows per chunk for merge-and-reduce, or None for one chunk (Algorithm 1 as is)
    tol, cache_mb, max_iter : libsvm's stopping tolerance, kernel cache and iteration limit
    random_state : int seed for the sampling and chunking (None means 0)

    Attributes
    ----------
    coreset_indices_ : rows of X in the coreset; coreset_weights_ : their weights v;
    n_coreset_ : number of distinct coreset rows; total_sensitivity_ : t of the last reduction;
    coef_, intercept_ : (1, d) and (1,) for the linear kernel (intercept_ for every kernel);
    support_vectors_, dual_coef_ : the kernel expansion on the coreset; objective_ : Eqn 2 on
    the weighted coreset at the fitted model; n_iter_ : libsvm's iterations on the coreset;
    solution_ : the solver's ``SVMSolution``.
    """

    def __init__(self, coreset_size=1000, C=1.0, kernel="linear", gamma="scale", degree=3,
                 coef0=0.0, epsilon=0.1, delta=0.1, bound="lemma7", chunk_size=None, tol=1e-5,
                 cache_mb=200.0, max_iter=-1, random_state=None):
        keep_params(self, locals())

    def _check_params(self) -> None:
        def positive_int(value, name):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")

        if self.coreset_size is not None:
            positive_int(self.coreset_size, "coreset_size")
        if self.chunk_size is not None:
            positive_int(self.chunk_size, "chunk_size")
        if not (isinstance(self.C, numbers.Real) and np.isfinite(float(self.C))
                and float(self.C) > 0):
            raise ValueError(f"C must be a positive finite number, got {self.C!r}.")
        if self.kernel not in SUPPORTED_KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(SUPPORTED_KERNELS)}, "
                             f"got {self.kernel!r}.")
        if self.bound not in BOUNDS:
            raise ValueError(f"bound must be one of {', '.join(BOUNDS)}, got {self.bound!r}.")
        if self.coreset_size is None and (self.kernel != "linear" or self.chunk_size is not None):
            raise ValueError("coreset_size=None (Theorem 9's size) needs kernel='linear' and "
                             "chunk_size=None; pass coreset_size as a number instead.")

    def fit(self, X, y, sample_weight=None):
        X, y = check_fit_data(self, X, y)
        self._check_params()
        y_index = encode_classes(self, y, binary_error=lambda classes: (
            f"Only binary classification is supported (the paper's SVM has two classes), "
            f"but y has {classes.size} class(es) {classes[:5].tolist()}; pass exactly two."))
        y_pm = plus_minus(y_index, 1)
        X, y_pm, weights = check_weighted_data(X, y_pm, sample_weight)
        self.kernel_ = Kernel.create(self.kernel, self.gamma, self.degree, self.coef0, X)
        coreset = self._build(X, y_pm, weights)
        if np.unique(coreset.y).size < 2:
            # Eqn 2 on one class is minimized by w = 0, b = its label: a constant model.
            label = self.classes_[int(coreset.y[0] > 0)]
            t = coreset.total_sensitivity
            warnings.warn(
                f"the coreset holds only class {getattr(label, 'item', lambda: label)()!r} "
                "(the rows of the other class have zero weight or were not drawn), so the model "
                "predicts it everywhere; increase coreset_size" + (
                    f" (Theorem 9 asks for about t/ε²·(d log t + log 1/δ) draws, t = {t:.3g})"
                    if np.isfinite(t) else "") + ".", UserWarning)
        solution = solve_weighted_svm(coreset.X, coreset.y, coreset.weights, self.C,
                                      self.kernel_, self.tol, self.cache_mb, self.max_iter)
        if not solution.converged:
            warnings.warn(f"libsvm stopped at max_iter={self.max_iter} before meeting "
                          f"tol={self.tol}; increase max_iter.", ConvergenceWarning)
        self.coreset_indices_ = coreset.indices
        self.coreset_weights_ = coreset.weights
        self.n_coreset_ = len(coreset)
        self.total_sensitivity_ = coreset.total_sensitivity
        self.coreset_bound_ = coreset.bound
        self.solution_ = solution
        self.support_vectors_ = solution.support_vectors
        self.dual_coef_ = solution.dual_coef[None, :]
        self.intercept_ = np.array([solution.intercept])
        if solution.coef is not None:
            self.coef_ = solution.coef[None, :]
        self.objective_ = solution.objective
        self.n_iter_ = solution.n_iter
        self.model_ = with_fit_features(self, KernelExpansion(
            solution.support_vectors, solution.dual_coef[:, None], self.kernel_,
            self.classes_, self.intercept_))
        return self

    def _build(self, X, y, weights):
        """The coreset: Algorithm 1 on all rows, or per shuffled chunk then merge-and-reduce."""
        seed = seed_from(self.random_state)
        reduction = ReductionSettings(kernel=self.kernel_, bound=self.bound, tol=self.tol,
                                      cache_mb=self.cache_mb)
        if self.coreset_size is None:
            solution = solve_weighted_svm(X, y, weights, self.C, self.kernel_, self.tol,
                                          self.cache_mb)
            gamma = sensitivity_bounds(X, y, weights, self.C, solution, self.bound)
            size = min(X.shape[0], sample_size_bound(gamma.sum(), X.shape[1] + 1,
                                                     self.epsilon, self.delta))
            self.coreset_size_ = size
            if size >= np.count_nonzero(weights):  # every row: the data is its own coreset
                return build_coreset(X, y, size, self.C, weights, seed=seed,
                                     reduction=reduction)
            return sample_coreset(X, y, weights, gamma, size, seed, bound=self.bound)
        self.coreset_size_ = self.coreset_size
        if self.chunk_size is None or self.chunk_size >= X.shape[0]:
            return build_coreset(X, y, self.coreset_size, self.C, weights, seed=seed,
                                 reduction=reduction)
        order = np.random.default_rng([seed, 0]).permutation(X.shape[0])
        chunks = [order[start:start + self.chunk_size]
                  for start in range(0, X.shape[0], self.chunk_size)]
        coresets = [build_coreset(X[rows], y[rows], self.coreset_size, self.C, weights[rows],
                                  seed=[seed, 1, k], indices=rows, reduction=reduction)
                    for k, rows in enumerate(chunks)]
        return merge_and_reduce(coresets, self.coreset_size, self.C, seed=[seed, 2],
                                reduction=reduction)

    def decision_function(self, X):
        """``wᵀx + b`` (linear) or ``Σ_s dual_coef_s k(sv_s, x) + b``; > 0 means classes_[1]."""
        X = check_predict_data(self, X)
        return self.solution_.decision_function(X)

    def predict(self, X):
        return predict_labels(self, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # the paper's SVM is binary
        return tags
