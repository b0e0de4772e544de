"""Driver-side methods, fitted in a child process (see :mod:`.budget`): exact ODM, single-node
SVRG, scikit-learn's SVC (LIBSVM) and LinearSVC (LIBLINEAR). No Spark here.

Hyperparameter mapping (documented in the job's help and in docs/benchmarks.md):

* ODM methods share λ, θ, v (docs/design.md §1 parameterization); RBF methods share one numeric
  gamma, resolved once from the training rows.
* SVC's C and ODM's λ are different losses (hinge vs squared margin-distribution loss), so C
  is its own flag (``--svc-C``), not derived from λ. LinearSVC takes ``--linear-C``; MLlib's
  LinearSVC gets the same problem through ``regParam = 1 / (C · M)`` (MLlib averages the hinge
  loss over the M rows; scikit-learn sums it).
"""
from __future__ import annotations

import time
import warnings

import numpy as np

DRIVER_METHODS = ("exact-odm", "svrg", "svc", "linearsvc", "xgboost", "nystroem-linear")
# what the SVs column says for models without support vectors (default: linear)
SV_LABELS = {"xgboost": "trees", "xgboost-spark": "trees", "nystroem-linear": "landmarks",
             "nystroem-spark": "landmarks"}
# methods whose package is an optional extra (pip install -e '.[bench]'): skipped without it
OPTIONAL_PACKAGES = {"xgboost": "xgboost", "xgboost-spark": "xgboost"}


def build_estimator(method: str, settings: dict, gamma: float):
    """The estimator ``method`` names, configured from the shared ``settings``."""
    from sklearn.svm import SVC, LinearSVC

    from ..estimators.sklearn import ODMClassifier

    odm = {k: settings[k] for k in ("lam", "theta", "v")}
    if method == "exact-odm":
        return ODMClassifier(kernel="rbf", gamma=gamma, tol=settings["tol"],
                             max_iter=settings["max_iter"], cache_mb=settings["cache_mb"],
                             random_state=settings["seed"], **odm)
    if method == "svrg":
        return ODMClassifier(kernel="linear", solver="svrg", max_iter=settings["epochs"],
                             random_state=settings["seed"],
                             **{**odm, "lam": settings["linear_lam"]})
    if method == "svc":
        return SVC(C=settings["svc_C"], kernel="rbf", gamma=gamma,
                   cache_size=min(2000.0, settings["cache_mb"] or 2000.0))
    if method == "linearsvc":
        return LinearSVC(C=settings["linear_C"], random_state=settings["seed"], max_iter=5000)
    if method == "xgboost":
        from xgboost import XGBClassifier
        return XGBClassifier(tree_method="hist", n_estimators=settings["xgb_trees"],
                             max_depth=settings["xgb_depth"], n_jobs=settings["threads"],
                             random_state=settings["seed"])
    if method == "nystroem-linear":
        from sklearn.kernel_approximation import Nystroem
        from sklearn.pipeline import make_pipeline
        return make_pipeline(
            Nystroem(kernel="rbf", gamma=gamma, n_components=settings["nystroem_components"],
                     random_state=settings["seed"]),
            LinearSVC(C=settings["nystroem_C"], random_state=settings["seed"], max_iter=5000))
    raise ValueError(f"{method!r} is not a driver-side method; those are "
                     f"{', '.join(DRIVER_METHODS)}.")


def model_size(method: str, estimator, n_features: int) -> tuple[int | None, int]:
    """(support vectors or None for a model without them, floats the model stores)."""
    if method == "svrg":
        return None, n_features + 1  # w and the intercept
    if method == "linearsvc":  # w and b per class (one pair for two classes)
        return None, estimator.coef_.size + estimator.intercept_.size
    if method == "xgboost":  # per node: feature, threshold, two children, leaf value
        return None, 5 * len(estimator.get_booster().trees_to_dataframe())
    if method == "nystroem-linear":  # landmarks, K^-1/2, w and b (per class)
        m, linear = estimator[0].components_.shape[0], estimator[-1]
        return None, m * n_features + m * m + linear.coef_.size + linear.intercept_.size
    n_sv = int(estimator.support_vectors_.shape[0])  # rows, their coefficients per class
    return n_sv, n_sv * n_features + int(np.asarray(estimator.dual_coef_).size)


def fit_and_score(method: str, settings: dict, gamma: float, arrays_dir: str,
                  ready=lambda: None) -> dict:
    """Fit on the stored training rows, score the test rows; the child process's whole job."""
    from .budget import ArrayStore

    arrays = ArrayStore.load(arrays_dir)
    X, y, X_test, y_test = (arrays[k] for k in ("X_train", "y_train", "X_test", "y_test"))
    estimator = build_estimator(method, settings, gamma)
    classes = np.unique(y)  # XGBoost wants class numbers 0..K-1
    targets = np.searchsorted(classes, y) if method == "xgboost" else y
    ready()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        estimator.fit(X, targets)
        fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    predictions = estimator.predict(X_test)
    if method == "xgboost":
        predictions = classes[np.asarray(predictions, dtype=np.int64)]
    predict_seconds = time.perf_counter() - start
    n_sv, floats = model_size(method, estimator, X.shape[1])
    notes = sorted({f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught
                    if issubclass(w.category, (UserWarning, RuntimeWarning))})
    return {"accuracy": float(np.mean(predictions == y_test)), "fit_seconds": fit_seconds,
            "predict_seconds": predict_seconds, "n_sv": n_sv, "model_floats": floats,
            "note": "; ".join(notes), **({"sv_label": SV_LABELS[method]}
                                        if method in SV_LABELS else {})}
