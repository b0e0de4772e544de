"""The model, its compression and its scoring, free of Spark: ``expansion.py``
(``KernelExpansion``, ``InputMap``, labels from scores; saved as arrays + JSON), ``compression.py``
(reduced-set compression of kernel models), ``input_projection.py`` (the input map of wide
rows), ``nystroem_odm.py`` (the global step's Nyström ODM) and ``scoring.py`` (float32 scoring with float64
re-checks, the batch scorer's numerics).

Imports only the layers below it (docs/design.md §5): ``core/``, ``partition/`` (compression's
landmarks and k-means) and ``data/`` (model folders, ``storage.py``); never Spark or a layer
above (``selection/`` is the next one up: it judges models). This ``__init__`` imports nothing.
"""
