"""Model selection, free of Spark: the stop rule over SODM's levels (``stopping.py``), the
hyperparameter grid and one partition's search (``tuning.py``) and its report
(``tuning_report.py``).

Imports only the layers below it (docs/design.md §5), today ``core/`` and ``solvers/`` (the
search solves ODMs); never Spark, ``models/`` beside it or a layer above. This ``__init__``
imports nothing.
"""
