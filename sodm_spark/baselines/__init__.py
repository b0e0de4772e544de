"""Single-machine comparators of design.md §4, scikit-learn style (numerics in ``solvers``)."""
