"""CSVRGClassifier: kernel ODM (or SVM) trained by coreset SVRG (Algorithm 1 of the CSVRG paper:
Tan, Zhang & Wang, "Coreset Stochastic Variance-Reduced Gradient with Application to Optimal
Margin Distribution Machine", AAAI 2019).

The numerics live in :mod:`sodm_spark.baselines.csvrg_solver`; this module is their
scikit-learn face (docs/design.md §4, "CSVRG").
"""
from __future__ import annotations

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
from .csvrg_solver import CSVRGSchedule, CoverageSettings, KernelCache, MarginLoss, csvrg


class CSVRGClassifier(ClassifierMixin, BaseEstimator):
    """Sparse kernel classifier ``f(x) = Σ_r σ_r k(c_r, x)`` over at most ``max_core`` core
    points, trained by CSVRG (coreset-approximated SVRG with projection, the CSVRG paper's Alg. 1).

    With ``loss='odm'`` the objective is the ODM primal of docs/design.md §1 (the same λ, θ, v as
    :class:`sodm_spark.ODMClassifier`; the paper's λ is half of ours); 'hinge' and
    'squared_hinge' minimize ``½‖w‖² + (λ/m)·Σ_i ℓ_i`` (the paper's Eqn 3; λ/m is
    scikit-learn's C). No intercept, as in the paper. See
    :func:`sodm_spark.baselines.csvrg_solver.csvrg` for the algorithm and every conversion.

    Parameters
    ----------
    kernel, gamma, degree, coef0 : as in ``ODMClassifier`` (gamma 'scale' = 1/(d·Var X))
    lam, theta, v : λ > 0; θ ∈ [0, 1) and v ∈ (0, 1] (ODM only)
    loss : 'odm', 'hinge' or 'squared_hinge'
    delta : cell diameter δ of the coreset (in ``metric``), or None to pick it so that about
        ``max_core`` cells cover the data
    max_core : most core points r (the model size); a step costs O(r)
    metric : 'kernel' (distance in the RKHS) or 'input' (the paper's input-space balls)
    refine : centroid (Lloyd) steps on the core points after the online pass (0: the paper's
        first point of each cell)
    per_class : cover each class apart, so no cell mixes labels
    epochs, inner_steps : most SVRG epochs; steps per epoch (None: one per row)
    step : SVRG step η (None: 1/(2L)); the hinge decays it as η/epoch
    option : 'I' (snapshot = last iterate) or 'II' (a random iterate), Alg. 1 lines 20-21
    tol : stop when the objective changes by at most ``tol`` (relative) over an epoch
    cache_mb : memory for the rows × cores kernel matrix (recomputed per epoch if larger)
    random_state : int seed of the coreset order and the sampling (None means 0)

    Binary only: labels may be any two values (``classes_[1]`` scores positive); for more
    classes wrap it in ``sklearn.multiclass.OneVsRestClassifier``.
    """

    def __init__(self, kernel="rbf", gamma="scale", degree=3, coef0=0.0, lam=1000.0, theta=0.1,
                 v=0.5, loss="odm", delta=None, max_core=1000, metric="kernel", refine=1,
                 per_class=True, epochs=30, inner_steps=None, step=None, option="I", tol=1e-3,
                 cache_mb=1024.0, random_state=None):
        keep_params(self, locals())

    def fit(self, X, y):
        X, y = check_fit_data(self, X, y)
        y_index = encode_classes(self, y, binary_error=lambda classes: (
            f"CSVRGClassifier is a binary classifier, but y has {classes.size} "
            f"class(es): {list(classes[:10])}. For more classes use "
            "sklearn.multiclass.OneVsRestClassifier(CSVRGClassifier(...))."))
        kernel = Kernel.create(self.kernel, self.gamma, self.degree, self.coef0, X)
        result = csvrg(
            X, plus_minus(y_index, 1), kernel,
            MarginLoss(self.lam, self.theta, self.v, self.loss),
            coverage=CoverageSettings(self.delta, self.max_core, self.metric, self.refine,
                                      self.per_class),
            schedule=CSVRGSchedule(epochs=self.epochs, inner_steps=self.inner_steps,
                                   step=self.step, relative_change_tol=self.tol,
                                   seed=seed_from(self.random_state), option=self.option),
            cache=KernelCache(cache_mb=self.cache_mb))
        if self.tol > 0 and not result.converged:
            warnings.warn(f"CSVRGClassifier stopped at epochs={self.epochs} with the objective "
                          f"still changing by more than tol={self.tol}; increase epochs or tol.",
                          ConvergenceWarning)
        self.kernel_, self._gamma = kernel, kernel.gamma
        self.result_ = result
        self.support_vectors_ = result.core_points
        self.dual_coef_ = result.sigma[None, :]
        self.n_core_ = result.n_core
        self.n_iter_ = result.epochs
        self.objective_history_ = np.asarray(result.history)
        self.delta_ = result.coreset.delta
        self.coverage_ = result.coverage
        self.converged_ = result.converged
        self.model_ = with_fit_features(self, KernelExpansion(
            result.core_points, result.sigma[:, None], kernel, self.classes_))
        return self

    def decision_function(self, X):
        """``f(x) = Σ_r σ_r k(c_r, x)``, positive for ``classes_[1]``."""
        X = check_predict_data(self, X)
        return self.model_.decision_function(X)

    def predict(self, X):
        return predict_labels(self, X)
