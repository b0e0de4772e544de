"""ODMClassifier: the exact ODM as a scikit-learn estimator (docs/design.md §7).

Longer than the other modules: the estimator's docstring documents every parameter and
attribute, as scikit-learn's own do, and the fit's checks stay beside the solve they guard.
"""
from __future__ import annotations

import warnings
from contextlib import suppress
from dataclasses import replace

import numpy as np
import scipy.sparse
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.exceptions import NotFittedError
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ..core import defaults
from ..core.array_namespace import check_device, resolve_device
from ..core.categories import encoded_frame
from ..core.column_stats import centring_offset
from ..core.errors import SettingsError
from ..core.feature_names import named_columns
from ..core.estimator_inputs import (check_fit_data, check_predict_data, encode_classes,
                                     keep_params, predict_labels, with_fit_features)
from ..core.kernels import Kernel, kernel_class
from ..core.labels import plus_minus
from ..core.validation import check_odm_params, seed_from
from ..core.weights import estimator_weights
from ..models.expansion import KernelExpansion
from ..solvers.local_solve import LocalSolve, expansion_coefficients
from ..solvers.odm_primal import newton_primal
from ..solvers.dcd_settings import ODMHyperparameters
from ..solvers.svrg import SVRGSchedule, svrg
from .probability import calibrated_model, check_calibration


SOLVERS = ("auto", "dcd", "newton", "svrg")
PRIMAL_SOLVERS = ("newton", "svrg")  # linear kernel only; they fit the intercept


#: The most rows whose unconverged coordinate descent is finished by Newton steps (one direct
#: solve of at most this many rows per step: under a tenth of a second).
NEWTON_FINISH_ROWS = 1000


def _finish_by_newton(solve: LocalSolve, solution, n_rows: int) -> bool:
    """Whether the numba coordinate descent ran out of sweeps on a small problem, which
    finite Newton steps (``solvers/odm_newton.py``, on numpy) finish from where it stopped: at
    λ = 1e5 on tens of rows it can need 15,000 sweeps, Newton ten (docs/design.md §2.10)."""
    return (not solution.converged and n_rows <= NEWTON_FINISH_ROWS
            and resolve_device(solve.device) is None)


def _translation(kernel: Kernel, X) -> np.ndarray | None:
    """The rows' column means when the dual is solved on the rows less them
    (:func:`~sodm_spark.core.column_stats.centring_offset`: dense rows of a radial kernel,
    whose squared distances ‖x‖² + ‖z‖² − 2x·z lose digits when the rows lie farther from the
    origin than they spread), else None (CSR rows keep their zeros; the laplacian's L1
    distances are taken directly; the other kernels are not translation invariant)."""
    if not kernel.radial or scipy.sparse.issparse(X) or X.shape[0] < 2:
        return None
    rows = np.asarray(X, dtype=np.float64)
    return centring_offset(rows.mean(axis=0), rows.var(axis=0))


class ODMClassifier(ClassifierMixin, BaseEstimator):
    """Optimal margin Distribution Machine solved exactly by dual coordinate descent.

    Minimizes ``½‖w‖² + λ/(2M) Σ (ξ_i² + v ε_i²)/(1-θ)²`` (SODM paper Sec. 2.1) through its dual
    (Eqn 1); see :func:`sodm_spark.solvers.solve_odm_dual`. With the linear kernel the primal is
    solved directly and has an unpenalized intercept by default (``fit_intercept``, as
    scikit-learn's LinearSVC and MLlib); the kernel dual has no bias term, as in the paper, and
    ``kernel_offset`` c gives it one through the kernel k + c.

    Parameters
    ----------
    kernel : {'rbf', 'linear', 'poly', 'laplacian', 'matern'} (sodm_spark.core.kernels:
        ``kernel_names()``; 'matern' is the Matérn kernel of ν = 3/2 whose γ is 1/ℓ²)
    gamma : 'scale' (1/(d·Var X)), 'auto' (1/d) or a positive float
    degree, coef0 : polynomial kernel ``(gamma x·z + coef0) ** degree``
    lam : λ > 0, weight of the margin loss (λ here = 2 × libodm's λ); default 1e5
    theta : θ ∈ [0, 1), half-width of the zero-loss margin band [1-θ, 1+θ]; default 0.1
    v : v ∈ (0, 1] (libodm's μ), weight of margins above 1+θ; default 0.2
    tol : stop when every point's projected-gradient violation is at most ``tol``; default 1e-2
    max_iter : most sweeps over the data (a ConvergenceWarning says when it stopped the solve);
        default 1000. The defaults of these and of the kernel settings are those of
        :class:`~sodm_spark.estimators.ml.SODMClassifier` and the training job
        (:mod:`sodm_spark.core.defaults`; docs/jobs.md, "Default hyperparameters")
    cache_mb : memory for kernel rows; the whole kernel matrix is cached when it fits, else
        kernel rows are computed on demand in blocks with an LRU cache of this size. None
        (default): what the machine has available when the fit starts, less a reserve
    dtype : 'float32' (default, half the memory, ~7 digits), 'float64', or 'int16' (fixed
        point at a quarter of float64's memory, entries within 1.5e-5 of the rbf kernel's; a
        cached binary matrix only, float32 elsewhere) for the kernel cache
    random_state : int seed for the sweep order (None means 0: the optimum does not depend on it)
    solver : 'auto' (default: 'newton' for the linear kernel, 'dcd' otherwise), 'dcd' (dual
        coordinate descent, any kernel, no intercept), 'newton' (linear kernel: the exact primal
        by generalized Newton, stopped at relative gradient norm min(tol, 1e-8)) or 'svrg'
        (linear kernel: SVRG on the primal, the paper's ODM_svrg comparator; ``max_iter``
        counts epochs, ``tol`` is the relative objective change). The primal solvers' model is
        f(x) = wᵀx + b: ``support_vectors_`` holds w (one row per output), ``dual_coef_`` the
        identity and ``intercept_`` b. Every solver accepts scipy sparse X (kept CSR: the dual
        computes its kernel blocks from sparse products, and ``support_vectors_`` are then CSR
        rows), except the laplacian kernel, whose L1 distances need dense rows.
    fit_intercept : bool, default True. Linear kernel, primal solvers: fit an unpenalized bias b
        (only ‖w‖² is penalized, as MLlib's LinearSVC; the fit then does not depend on where
        the data's origin lies). Other kernels have no bias; use ``kernel_offset``.
    kernel_offset : c ≥ 0, default 0: solve with the kernel k + c, i.e. a penalized bias
        c·Σ_i γ_i y_i (see :mod:`sodm_spark.core.kernels`). Measured on Fashion-MNIST, letter and
        satellite with the RBF kernel, c = 1 changed test accuracy by at most a few rows
        (docs/jobs.md, "Intercepts"), hence the default 0, the paper's model.
    class_weight : None, 'balanced' or dict label: weight, default None. Each class's rows'
        margin loss times its weight (with ``fit``'s ``sample_weight``, the product), as
        :class:`sklearn.svm.SVC`'s; 'balanced' is n / (C·n_c) (docs/design.md §1.4).
    probability : bool, default False. Fit a calibration too, as ``SVC(probability=True)``
        does: on every row's decision value from a model fitted without the row's fold (5
        stratified folds seeded by ``random_state``; :mod:`sodm_spark.estimators.probability`),
        which costs 5 more fits; then ``predict_proba`` and ``predict_log_proba`` exist.
    calibration : 'sigmoid' (default, Platt's) or 'isotonic' (a monotone map, for a few
        thousand rows or more): the map from decision values to probabilities
        (:mod:`sodm_spark.models.calibration`). Three or more classes: one map per class of
        its one-vs-rest score, each row's probabilities divided by their sum.
    device : 'auto' (default: a GPU when one is visible, else the numba solver), 'cpu' (the
        array solver on numpy) or 'gpu' (a CUDA GPU; a ResourceError where there is none):
        where the dual solve runs (docs/design.md §2.10). The primal solvers run on the CPU
        whatever it says.

    Binary labels may be any two values; more than two classes are fitted one-vs-rest.

    Fitted on a pandas DataFrame whose column names are all strings, it keeps them
    (``feature_names_in_``; ``model_.feature_names`` with the dtypes, which a saved model, the
    MLflow flavor and the ONNX export keep), and ``predict``, ``decision_function``,
    ``predict_proba``, ``predict_log_proba`` and ``score`` take a DataFrame's columns **by
    name**: another order is reordered (scikit-learn's own estimators refuse it), so it gives
    the same answer; a column the fit did not see is left out with one ``UserWarning`` naming
    it; a missing one is refused with a ValueError naming it. Arrays and CSR rows are taken by
    position, with scikit-learn's warnings where only the fit or only the rows had names
    (:mod:`sodm_spark.core.estimator_inputs`).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The sorted label values; with two, ``classes_[1]`` is the positive class (f > 0).
    n_features_in_ : int
        Features seen during ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        The column names of the DataFrame fitted on, when all are strings (the order the model
        takes them in; absent after a fit on rows without names).
    kernel_ : Kernel
        The kernel with ``gamma`` resolved to a number (:class:`sodm_spark.core.kernels.Kernel`).
    support_ : ndarray of shape (n_SV,)
        Indices of the training rows with a nonzero dual coefficient in any output (empty for
        the primal solvers).
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features)
        Those rows (CSR when X was sparse). The primal solvers store w here instead, one row
        per output.
    dual_coef_ : ndarray of shape (n_outputs, n_SV)
        ``γ_i y_i`` of each support vector, one row per output (one for two classes, else one
        per class, one-vs-rest); the identity for the primal solvers.
    intercept_ : ndarray of shape (n_outputs,)
        The bias b of the primal solvers with ``fit_intercept``; zeros otherwise.
    n_iter_ : ndarray of shape (n_outputs,)
        Sweeps (dual), Newton iterations or SVRG epochs of each output's solve.
    objective_ : ndarray of shape (n_outputs,)
        The final objective of each output's problem (the dual of Eqn 1, or the primal).
    converged_ : bool
        Whether every solve met ``tol`` within ``max_iter``.
    model_ : KernelExpansion
        The decision function as a model that saves, loads and compresses
        (:class:`sodm_spark.models.expansion.KernelExpansion`).
    n_support_ : int
        The number of support vectors (a property).

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import minmax_scale
    >>> from sodm_spark import ODMClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = minmax_scale(X)
    >>> clf = ODMClassifier(kernel="rbf").fit(X[:400], y[:400])  # λ = 1e5, θ = 0.1, v = 0.2
    >>> clf.classes_
    array([0, 1])
    >>> clf.dual_coef_.shape[0]  # one output for two classes
    1
    >>> clf.predict(X[400:405]).shape
    (5,)
    >>> accuracy = clf.score(X[400:], y[400:])
    >>> clf.model_.save("odm-model")  # arrays.npz + metadata.json, no pickles
    >>> ODMClassifier.load("odm-model").predict(X[400:405]).shape
    (5,)

    The linear kernel solves the primal, with an unpenalized intercept:

    >>> linear = ODMClassifier(kernel="linear").fit(X[:400], y[:400])
    >>> linear.support_vectors_.shape, linear.intercept_.shape  # w and b
    ((1, 30), (1,))
    """

    # the ODM settings' defaults are sodm_spark.core.defaults', which SODMParams (the Spark
    # fits, SODMClassifier, the jobs) reads too: a setting left unset means the same on every path
    def __init__(self, kernel=defaults.KERNEL, gamma=defaults.GAMMA, degree=defaults.DEGREE,
                 coef0=defaults.COEF0, lam=defaults.LAM, theta=defaults.THETA, v=defaults.V,
                 tol=defaults.TOL, max_iter=defaults.MAX_ITER, cache_mb=None, dtype="float32",
                 random_state=None, solver="auto", fit_intercept=defaults.FIT_INTERCEPT,
                 kernel_offset=defaults.KERNEL_OFFSET, class_weight=defaults.CLASS_WEIGHT,
                 probability=False, calibration=defaults.CALIBRATION, device=defaults.DEVICE):
        keep_params(self, locals())

    def _solver(self):
        if self.solver not in SOLVERS:
            raise SettingsError(f"solver must be one of {', '.join(map(repr, SOLVERS))}, "
                                f"got {self.solver!r}.")
        if self.solver == "auto":
            return "newton" if self.kernel == "linear" else "dcd"
        return self.solver

    def _accept_sparse(self):
        return "csr"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        with suppress(ValueError):  # the laplacian's L1 distances need dense rows; an
            tags.input_tags.sparse = kernel_class(self.kernel).sparse_refusal is None
        return tags  # unknown kernel is refused by fit

    def fit(self, X, y, sample_weight=None):
        """Fit on rows ``X`` with labels ``y`` (:meth:`_fit_rows`); with ``probability``, the
        model's calibration too, on out-of-fold decision values (:mod:`.probability`)."""
        check_calibration(self)
        self._fit_rows(X, y, sample_weight)
        self.model_ = with_fit_features(self, self.model_)  # a DataFrame's names and dtypes
        if self.probability:
            self.model_ = calibrated_model(self, X, y, sample_weight)
        return self

    def _fit_rows(self, X, y, sample_weight=None):
        """Fit on rows ``X`` with labels ``y``; ``sample_weight`` (one number ≥ 0 per row)
        and ``class_weight`` weight each row's margin loss (docs/design.md §1.4: an integer
        weight is that many copies of the row; rows of weight 0 are left out)."""
        solver = self._solver()
        check_device(self.device)  # every solver checks it, though only the dual reads it
        if solver in PRIMAL_SOLVERS and self.kernel != "linear":
            raise SettingsError(f"solver={solver!r} works on the primal and needs kernel='linear', "
                                f"got kernel={self.kernel!r}; use solver='dcd' for other kernels.")
        if solver == "dcd" and self.kernel == "linear" and self.fit_intercept:
            raise SettingsError("solver='dcd' solves the ODM dual (SODM Eqn 1), which has no "
                                "intercept; pass fit_intercept=False for the paper's model, or "
                                "solver='newton' / 'svrg' (the primal, with an intercept).")
        if solver in PRIMAL_SOLVERS and self.kernel_offset:
            raise SettingsError(f"kernel_offset applies to the kernel dual (solver='dcd'); "
                                f"solver={solver!r} fits an unpenalized intercept instead "
                                "(fit_intercept). Pass kernel_offset=0.")
        X, y = check_fit_data(self, X, y, accept_sparse=self._accept_sparse())
        refusal = kernel_class(self.kernel).sparse_refusal
        if refusal is not None and scipy.sparse.issparse(X):
            raise SettingsError(f"X is sparse: {refusal}.")
        if solver in PRIMAL_SOLVERS:  # whose tol bounds the objective's change or gradient
            check_odm_params(self.lam, self.theta, self.v)
        else:  # validates λ, θ, v, tol, max_iter, cache_mb and dtype before any work on the rows
            solve = LocalSolve(self.lam, self.theta, self.v, violation_tol=self.tol,
                               max_iter=self.max_iter, cache_mb=self.cache_mb,
                               dtype=self.dtype, device=self.device)
        y_index = encode_classes(self, y)
        weights = estimator_weights(self.class_weight, self.classes_, y_index, sample_weight)
        kernel = Kernel.create(self.kernel, self.gamma, self.degree, self.coef0, X,
                               self.kernel_offset)
        kept = None  # the rows fitted, when some of weight 0 are left out
        if weights is not None and not weights.all():
            kept = np.flatnonzero(weights)
            X, y_index, weights = X[kept], y_index[kept], weights[kept]
        self.kernel_ = kernel
        self._gamma = kernel.gamma
        # rows far from the origin are solved less their mean, which the model keeps as its
        # input map's offset (the levels' unscaled rows are moved alike, ColumnStats.centring)
        center = _translation(kernel, X)
        solved_rows = X if center is None else np.asarray(X, dtype=np.float64) - center
        # Binary: one problem with classes_[1] as +1. More classes: one-vs-rest.
        targets = [1] if self.classes_.size == 2 else range(self.classes_.size)
        if solver in PRIMAL_SOLVERS:
            return self._fit_primal(solver, X, y_index, targets, kernel, weights)
        n_classes = 0 if self.classes_.size == 2 else self.classes_.size
        y_solved = y_index if n_classes else plus_minus(y_index, 1)
        # every class's solve shares the one seed, as ODMClassifier's always have
        solution = solve.solve(solved_rows, y_solved, kernel, n_classes,
                               seed=seed_from(self.random_state), seed_each_class=False,
                               weights=weights)
        sweeps = solution.sweeps
        if _finish_by_newton(solve, solution, solved_rows.shape[0]):
            solution = replace(solve, device="cpu").solve(
                solved_rows, y_solved, kernel, n_classes, warm_start=solution.gamma,
                weights=weights)
            sweeps = sweeps + solution.sweeps
        for run in solution.runs:
            self._warn_unless_converged(run)
        coef = expansion_coefficients(y_solved, solution.gamma).reshape(X.shape[0], -1)
        return self._store_dual(X, coef, kernel, sweeps, solution.objectives,
                                solution.converged, kept, center)

    def _warn_unless_converged(self, result):
        if not result.converged:
            warnings.warn(
                f"ODMClassifier stopped at max_iter={self.max_iter} sweeps with largest "
                f"violation {result.violation:.3g} > tol={self.tol}; increase max_iter or tol.",
                ConvergenceWarning)

    def _store_dual(self, X, coef, kernel, n_iter, objectives, converged, kept=None,
                    center=None):
        """The fitted attributes of a dual fit from its coefficients γ_i y_i, (m, outputs);
        ``kept``: the fitted rows' positions in the rows given (``support_`` indexes those);
        ``center``: the translation the rows were solved under (the model's input offset)."""
        support = np.flatnonzero(np.any(coef != 0.0, axis=1))
        self.support_ = support if kept is None else kept[support]
        self.support_vectors_ = X[support]
        self.dual_coef_ = coef[support].T
        self.n_iter_ = np.asarray(n_iter)
        self.objective_ = np.asarray(objectives)
        self.converged_ = bool(converged)
        self.intercept_ = np.zeros(coef.shape[1])
        if center is None:
            self.model_ = KernelExpansion(self.support_vectors_, coef[support], kernel,
                                          self.classes_)
        else:
            self.model_ = KernelExpansion(
                np.asarray(self.support_vectors_, dtype=np.float64) - center, coef[support],
                kernel, self.classes_, feature_offset=center, feature_scale=np.ones_like(center))
        return self

    def _fit_primal(self, solver, X, y_index, targets, kernel, sample_weight=None):
        """The linear primal by Newton (exact) or SVRG (ODM_svrg): one (w, b) per output,
        stored as a linear expansion with intercepts."""
        weights, intercepts, n_iter, objectives, converged = [], [], [], [], []
        bias = bool(self.fit_intercept)
        # the public tol, as each primal solver reads it: SVRG stops when an epoch changes the
        # objective by at most this share of it; Newton when ‖∇P‖ ≤ gradient_tol·max(1, ‖∇P(0)‖)
        relative_change_tol, gradient_tol = self.tol, min(float(self.tol), 1e-8)
        for target in targets:
            y_pm = plus_minus(y_index, target)
            if solver == "svrg":
                result = svrg(X, y_pm, ODMHyperparameters(self.lam, self.theta, self.v),
                              SVRGSchedule(epochs=self.max_iter,
                                           relative_change_tol=relative_change_tol,
                                           seed=seed_from(self.random_state)),
                              fit_intercept=bias, weights=sample_weight)
                n_iter.append(result.epochs)
                done = result.converged
            else:
                result = newton_primal(X, y_pm, self.lam, self.theta, self.v,
                                       gradient_tol=gradient_tol, max_iter=self.max_iter,
                                       fit_intercept=bias, weights=sample_weight)
                n_iter.append(result.iterations)
                done = result.iterations < self.max_iter
            weights.append(result.w)
            intercepts.append(result.intercept)
            objectives.append(result.objective)
            converged.append(done)
            if not done:
                warnings.warn(f"ODMClassifier(solver={solver!r}) stopped at max_iter="
                              f"{self.max_iter} {'epochs' if solver == 'svrg' else 'iterations'}"
                              "; increase max_iter or tol.", ConvergenceWarning)
        self.support_vectors_ = np.stack(weights)
        self.dual_coef_ = np.eye(len(weights))
        self.support_ = np.arange(0)
        self.intercept_ = np.asarray(intercepts, dtype=np.float64)
        self.n_iter_ = np.asarray(n_iter)
        self.objective_ = np.asarray(objectives)
        self.converged_ = bool(all(converged))
        self.model_ = KernelExpansion(self.support_vectors_, self.dual_coef_, kernel,
                                      self.classes_, self.intercept_ if bias else None)
        return self

    @classmethod
    def from_expansion(cls, expansion: KernelExpansion) -> "ODMClassifier":
        """A fitted predictor from a saved or Spark-trained model (no refit); a calibrated
        model keeps its calibration (``probability=True``: ``predict_proba``), a model with
        feature names its names (``feature_names_in_``: a DataFrame's columns are taken by
        name, as after ``fit``)."""
        kernel = expansion.kernel
        calibration = expansion.calibration
        model = cls(kernel=kernel.name, gamma=kernel.gamma, degree=kernel.degree,
                    coef0=kernel.coef0, kernel_offset=kernel.offset,
                    fit_intercept=expansion.intercept is not None,
                    probability=calibration is not None,
                    calibration="sigmoid" if calibration is None else calibration.method)
        model.classes_ = np.asarray(expansion.classes)
        model.kernel_, model._gamma = kernel, kernel.gamma
        model.support_ = np.arange(expansion.support_vectors.shape[0])
        model.support_vectors_ = expansion.support_vectors
        model.dual_coef_ = expansion.coef.T
        model.intercept_ = (np.zeros(expansion.coef.shape[1]) if expansion.intercept is None
                            else np.asarray(expansion.intercept, dtype=np.float64))
        model.n_features_in_ = expansion.n_features_in
        if expansion.feature_names is not None:
            model.feature_names_in_ = np.asarray(expansion.feature_names, dtype=object)
        model.model_ = expansion
        return model

    @classmethod
    def load(cls, path, store=None) -> "ODMClassifier":
        """A fitted predictor from the model directory ``path`` (``clf.model_.save(path)``, a
        job's ``--model-out``; a path or a URI), read and checked by KernelExpansion.load: a
        damaged directory is refused in one line naming the file."""
        return cls.from_expansion(KernelExpansion.load(path, store=store))

    @property
    def n_support_(self) -> int:
        check_is_fitted(self)
        return int(self.support_.size)

    def _prediction_rows(self, X):
        """``X`` as the model takes it: a DataFrame's input columns by name, its string
        columns encoded, for a model that encodes them (a job's: ``model_.categories``,
        :mod:`sodm_spark.core.categories`); else checked as scikit-learn checks them."""
        check_is_fitted(self)
        categories = self.model_.categories
        if categories is not None and named_columns(X) is not None:
            return encoded_frame(X, categories, stacklevel=4)
        return check_predict_data(self, X, accept_sparse=self._accept_sparse())

    def decision_function(self, X):
        """``f(x) = Σ_i γ_i y_i k(x_i, x)`` (+ b with an intercept): (n,) for two classes,
        (n, n_classes) otherwise."""
        rows = self._prediction_rows(X)  # checks the fit first
        return self.model_.decision_function(rows)

    def predict(self, X):
        return predict_labels(self, X)

    def _check_proba(self):
        if not self.probability:
            raise AttributeError("predict_proba is not available when probability=False")
        return True

    @available_if(_check_proba)
    def predict_proba(self, X):
        """(n, n_classes) class probabilities, columns in the order of ``classes_``: the
        calibration fitted with ``probability=True``. The predictions stay those of
        :meth:`predict` (the decision values), which may disagree with the largest
        probability near the boundary, as ``SVC``'s do."""
        X = self._prediction_rows(X)
        if self.model_.calibration is None:
            raise NotFittedError("predict_proba is not available when fitted with "
                                 "probability=False; fit again with probability=True.")
        return self.model_.predict_proba(X)

    @available_if(_check_proba)
    def predict_log_proba(self, X):
        """The logarithms of :meth:`predict_proba` (-inf where a probability is 0, which an
        isotonic map can give)."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))
