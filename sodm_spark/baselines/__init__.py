"""The single-machine comparators of docs/design.md §4, each beside its numerics.

Rule: a comparator's numerics live in ``<name>_solver.py`` (numpy/numba/libsvm, no Spark and
no scikit-learn estimator machinery, so one Spark task can run them: ``spark/single.py``);
its scikit-learn face lives in ``<name>.py``, named after the comparator.

- **CSVRG** (the CSVRG paper: Tan, Zhang & Wang, "Coreset Stochastic Variance-Reduced Gradient
  with Application to Optimal Margin Distribution Machine", AAAI 2019; Algorithm 1) —
  ``csvrg_solver.py`` (its coreset in ``csvrg_coreset.py``) + ``csvrg.py``
  (:class:`CSVRGClassifier`): kernel ODM, hinge or squared hinge (Eqn 3) over a δ-coverage
  coreset of core points ``w = Σ_r σ_r φ(c_r)`` (Definitions 1-2), trained by SVRG with
  coreset-approximated gradients (Eqns 6-9) and projection onto Theorem 1's ball; O(r) a step.
- **CVR / CVM** (the CVR paper: Tsang, Kwok & Lai, "Core Vector Regression for Very Large
  Regression Problems", ICML 2005) — ``cvm_solver.py`` + ``cvm.py`` (:class:`CVRRegressor`,
  :class:`CVMClassifier`): the L2-SVR (Eqn 6) and the two-class L2-SVM (Eqn 5) as a
  center-constrained minimum enclosing ball (Eqns 11-15), grown a furthest point at a time
  (best of 59 sampled rows, Sec. 3.3) until every row lies within (1+ε)R; ``cvm.py`` also has
  the paper's RMSE and MRE.
- **Coreset SVM** (the coreset SVM paper: "Small Coresets to Represent Large Training Data for
  Support Vector Machines", a manuscript under anonymous review; Algorithm 1) —
  ``coreset_svm_solver.py`` + ``coreset_svm.py``
  (:class:`CoresetSVMClassifier`): sensitivity bounds (Eqn 5, Lemma 7) from the exact SVM,
  multinomial sampling, weights ``t·K_i·u_i/(γ_i·m)``, the weighted SVM (Eqn 2) on the
  coreset; merge-and-reduce over chunks or Spark partitions (Sec. 4.2).
- **Nyström** (the benchmark's peers) — ``nystroem.py``: numerics only, the feature map
  ``φ(x) = k(x, Z) K_ZZ^{-1/2}`` the benchmark's peers pair with a linear model; it has no
  estimator of its own, so no ``_solver`` suffix.

The public names (``sodm_spark.CSVRGClassifier`` and the others) are loaded lazily by
``sodm_spark/__init__.py``; this package imports nothing on its own.
"""
