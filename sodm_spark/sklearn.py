"""ODMClassifier: the exact ODM as a scikit-learn estimator (design.md §6)."""
from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .kernels import Kernel
from .model import KernelExpansion
from .solvers import solve_odm_dual
from .solvers.svrg import svrg
from .validation import check_finite_rows, check_numeric_cells, check_odm_params, seed_from


class ODMClassifier(ClassifierMixin, BaseEstimator):
    """Optimal margin Distribution Machine solved exactly by dual coordinate descent.

    Minimizes ``½‖w‖² + λ/(2M) Σ (ξ_i² + v ε_i²)/(1-θ)²`` (SODM paper Sec. 2.1) through its dual
    (Eqn 1); see :func:`sodm_spark.solvers.solve_odm_dual`. There is no bias term, as in the
    paper; for an intercept with the linear kernel append a constant feature (the kernel k + 1).

    Parameters
    ----------
    kernel : {'rbf', 'linear', 'poly', 'laplacian'}
    gamma : 'scale' (1/(d·Var X)), 'auto' (1/d) or a positive float
    degree, coef0 : polynomial kernel ``(gamma x·z + coef0) ** degree``
    lam : λ > 0, weight of the margin loss (λ here = 2 × libodm's λ)
    theta : θ ∈ [0, 1), half-width of the zero-loss margin band [1-θ, 1+θ]
    v : v ∈ (0, 1] (libodm's μ), weight of margins above 1+θ
    tol : stop when every point's projected-gradient violation is at most ``tol``
    max_iter : most sweeps over the data (a ConvergenceWarning says when it stopped the solve)
    cache_mb : memory for kernel rows; the whole kernel matrix is cached when it fits, else
        kernel rows are computed on demand in blocks with an LRU cache of this size. None
        (default): what the machine has available when the fit starts, less a reserve
    dtype : 'float32' (default, half the memory, ~7 digits) or 'float64' for the kernel cache
    random_state : int seed for the sweep order (None means 0: the optimum does not depend on it)
    solver : 'dcd' (dual coordinate descent, any kernel) or 'svrg' (linear kernel only: SVRG on
        the primal, the paper's ODM_svrg comparator; accepts scipy sparse X, ``max_iter`` counts
        epochs). With 'svrg' the model is f(x) = wᵀx: ``support_vectors_`` holds w (one row per
        output) and ``dual_coef_`` the identity.

    Binary labels may be any two values; more than two classes are fitted one-vs-rest.
    """

    def __init__(self, kernel="rbf", gamma="scale", degree=3, coef0=0.0, lam=1000.0, theta=0.1,
                 v=0.5, tol=1e-3, max_iter=1000, cache_mb=None, dtype="float32",
                 random_state=None, solver="dcd"):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.lam = lam
        self.theta = theta
        self.v = v
        self.tol = tol
        self.max_iter = max_iter
        self.cache_mb = cache_mb
        self.dtype = dtype
        self.random_state = random_state
        self.solver = solver

    def _accept_sparse(self):
        return "csr" if self.solver == "svrg" else False

    def fit(self, X, y):
        if self.solver not in ("dcd", "svrg"):
            raise ValueError(f"solver must be 'dcd' or 'svrg', got {self.solver!r}.")
        if self.solver == "svrg" and self.kernel != "linear":
            raise ValueError(f"solver='svrg' works on the primal and needs kernel='linear', "
                             f"got kernel={self.kernel!r}; use solver='dcd' for other kernels.")
        check_numeric_cells(X, "X")
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_all_finite=False,
                             accept_sparse=self._accept_sparse())
        check_finite_rows(X, "X")
        check_classification_targets(y)
        check_odm_params(self.lam, self.theta, self.v)
        if np.dtype(self.dtype) not in (np.float32, np.float64):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}.")
        self.classes_, y_index = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(
                f"ODMClassifier needs at least two classes, but y has only one class "
                f"({self.classes_[0]!r}) in {y.size} rows; check the label column.")
        kernel = Kernel.create(self.kernel, self.gamma, self.degree, self.coef0, X)
        self.kernel_ = kernel
        self._gamma = kernel.gamma
        # Binary: one problem with classes_[1] as +1. More classes: one-vs-rest.
        targets = [1] if self.classes_.size == 2 else range(self.classes_.size)
        gammas, n_iter, objectives, converged = [], [], [], []
        if self.solver == "svrg":
            return self._fit_svrg(X, y_index, targets, kernel)
        for target in targets:
            y_pm = np.where(y_index == target, 1.0, -1.0)
            result = solve_odm_dual(X, y_pm, kernel, self.lam, self.theta, self.v, tol=self.tol,
                                    max_iter=self.max_iter, seed=seed_from(self.random_state),
                                    cache_mb=self.cache_mb, dtype=np.dtype(self.dtype))
            gammas.append(result.gamma * y_pm)
            n_iter.append(result.n_sweeps)
            objectives.append(result.objective)
            converged.append(result.converged)
            if not result.converged:
                warnings.warn(
                    f"ODMClassifier stopped at max_iter={self.max_iter} sweeps with largest "
                    f"violation {result.violation:.3g} > tol={self.tol}; increase max_iter or tol.",
                    ConvergenceWarning)
        coef = np.stack(gammas, axis=1)
        self.support_ = np.flatnonzero(np.any(coef != 0.0, axis=1))
        self.support_vectors_ = X[self.support_]
        self.dual_coef_ = coef[self.support_].T
        self.n_iter_ = np.asarray(n_iter)
        self.objective_ = np.asarray(objectives)
        self.converged_ = bool(all(converged))
        self.model_ = KernelExpansion(self.support_vectors_, coef[self.support_], kernel,
                                      self.classes_)
        return self

    def _fit_svrg(self, X, y_index, targets, kernel):
        """The primal by SVRG (ODM_svrg): one w per output, stored as a linear expansion."""
        weights, n_iter, objectives, converged = [], [], [], []
        for target in targets:
            result = svrg(X, np.where(y_index == target, 1.0, -1.0), self.lam, self.theta,
                          self.v, epochs=self.max_iter, tol=self.tol,
                          seed=seed_from(self.random_state))
            weights.append(result.w)
            n_iter.append(result.epochs)
            objectives.append(result.objective)
            converged.append(result.converged)
            if not result.converged:
                warnings.warn(f"ODMClassifier(solver='svrg') stopped at max_iter={self.max_iter} "
                              f"epochs; increase max_iter or tol.", ConvergenceWarning)
        self.support_vectors_ = np.stack(weights)
        self.dual_coef_ = np.eye(len(weights))
        self.support_ = np.arange(0)
        self.n_iter_ = np.asarray(n_iter)
        self.objective_ = np.asarray(objectives)
        self.converged_ = bool(all(converged))
        self.model_ = KernelExpansion(self.support_vectors_, self.dual_coef_, kernel,
                                      self.classes_)
        return self

    @classmethod
    def from_expansion(cls, expansion: KernelExpansion) -> "ODMClassifier":
        """A fitted predictor from a saved or Spark-trained binary model (no refit)."""
        kernel = expansion.kernel
        model = cls(kernel=kernel.name, gamma=kernel.gamma, degree=kernel.degree,
                    coef0=kernel.coef0)
        model.classes_ = np.asarray(expansion.classes)
        model.kernel_, model._gamma = kernel, kernel.gamma
        model.support_ = np.arange(expansion.support_vectors.shape[0])
        model.support_vectors_ = expansion.support_vectors
        model.dual_coef_ = expansion.coef.T
        model.n_features_in_ = expansion.support_vectors.shape[1]
        model.model_ = expansion
        return model

    @property
    def n_support_(self) -> int:
        check_is_fitted(self)
        return int(self.support_.size)

    def decision_function(self, X):
        """``f(x) = Σ_i γ_i y_i k(x_i, x)``: (n,) for two classes, (n, n_classes) otherwise."""
        check_is_fitted(self)
        check_numeric_cells(X, "X")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=False, reset=False,
                          accept_sparse=self._accept_sparse())
        check_finite_rows(X, "X")
        return self.model_.decision_function(X)

    def predict(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]
