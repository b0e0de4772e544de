import numpy as np
import pytest


def make_problem(m=60, d=5, seed=0, noise=0.5):
    """A small, not linearly separable two-class problem with labels ±1."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, d))
    y = np.where(X[:, 0] + X[:, 1] ** 2 - 1.0 + noise * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


@pytest.fixture
def problem():
    return make_problem()
