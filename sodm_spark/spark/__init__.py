"""Spark layer of sodm-spark: moves numpy blocks between tasks (design.md §5); numerics live elsewhere."""
