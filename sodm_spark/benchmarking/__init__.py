"""The side-by-side benchmark behind the benchmark job (``sodm-benchmark``): every method and
its peers on the same split in one Spark session, each under a time budget, with JSON, Markdown
and PNG outputs (matplotlib: the plots extra) and the results sections of docs/benchmarks.md.

Modules: :mod:`.run` (the job's steps, and the user's files read through Spark), :mod:`.budget`
(time budgets), :mod:`.methods` (the registry), :mod:`.spark_methods` and :mod:`.driver_fit`
(the runners), :mod:`.results` (the shared context and result rows), :mod:`.scaling` (rows
and cores), :mod:`.report` and :mod:`.plots` (outputs). The named data sets live one level
down, in :mod:`sodm_spark.data.datasets`. No numerics here: every runner calls the project's
solvers and estimators.
"""
