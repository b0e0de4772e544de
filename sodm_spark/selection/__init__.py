"""Model selection, free of Spark: the metrics a model is judged by on the validation slice and
the paired comparisons of two models (``metrics.py``, the logloss's cross-fitted calibration in
``cross_fit.py``), the stop rule over SODM's levels (``stopping.py``), the hyperparameter grid
and one partition's search (``tuning.py``) and its report (``tuning_report.py``).

Imports only the layers below it (docs/design.md §5), today ``core/``, ``solvers/`` (the
search solves ODMs) and ``models/`` (the logloss's Platt sigmoids); never Spark or a layer
above. This ``__init__`` imports nothing.
"""
