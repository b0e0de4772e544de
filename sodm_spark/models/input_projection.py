"""The input map of a fit on wide dense rows: their top principal components; pure numpy.

An RBF kernel entry on d features costs d multiply-adds plus the exp and its bookkeeping, worth
about 125 more (measured scoring 996 rows against 338,207 support vectors of 784 features: 19 ns
an entry on one core; 10,063 rows against 1,833,118 of 12 features: 3.2 ns), so on 784 pixels
most of a level's kernel time, and most of scoring the validation and test rows, goes to the
products. Wide image-like rows lie close to a subspace: on Fashion-MNIST 175 principal
directions of 4,000 rows keep 95% of the variance, and ``‖P(x − z)‖² ≤ ‖x − z‖²`` with P the projection onto them, so the
projected RBF kernel ``k(Px, Pz) = k(x, z) · exp(γ‖(I − P)(x − z)‖²)`` differs from the raw one
by the part of each distance that the dropped directions carry (so does any radial kernel, a
function of ‖x − z‖²: ``Kernel.radial``). The fit then runs on the r
projected inputs instead of the d raw ones (the kernel's γ stays the raw rows'), and the model
stores the map (:class:`~sodm_spark.models.expansion.InputMap`), so it scores raw rows.

The rule (:func:`fit_input_projection`), applied by default to a radial kernel's dense rows, and
to CSR rows full enough to be multiplied as dense ones (at least
:data:`~sodm_spark.core.sparse_rows.DENSE_PRODUCT_DENSITY` of their cells stored, as LIBSVM
pixels are; the projected rows are dense):

* the rows have at least :data:`MIN_FEATURES` features (narrower rows spend most of an entry's
  cost on the exp, so a cut of their products saves little);
* r is the fewest principal directions of a seeded sample (:data:`SAMPLE_ROWS` rows) that keep
  :data:`VARIANCE_KEPT` of its variance;
* r is at most :data:`MAX_SHARE` of d (the products at least three times cheaper), else the
  rows are kept as they are.

The report gives the width before and after, the variance kept and how far the projected
kernel is from the raw one on pairs of the sample (:func:`kernel_agreement`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse

from .expansion import InputMap

#: Dense rows narrower than this keep their features: an entry on 256 features spends a third
#: of its cost on the exp and bookkeeping, so even a cut to 85 saves under half of it.
MIN_FEATURES = 256
#: Share of the sample's variance the directions kept must hold. Exact ODM on the 60,000 binary
#: Fashion-MNIST rows (γ of the raw rows, λ = 1e5, θ = 0.1, v = 0.2, violation 1e-2; the
#: directions of a seeded 4,000-row sample; 10,000 test rows): 784 pixels 0.9779, this rule's
#: 173 components (95.0%) 0.9780, 128 components 0.9778, 64 components 0.9771 (run on 16
#: cores of another machine, 2026-11-26). An earlier measurement on 2 cores: 784 pixels 0.9776
#: in 55.8 s, 128 components 0.9773 in 23.3 s, 64 components 0.9764 in 15.7 s.
VARIANCE_KEPT = 0.95
#: The projection is kept only when it at least triples the speed of the products.
MAX_SHARE = 1.0 / 3.0
#: Rows of the seeded sample the directions come from (4,000 × 784: an SVD of 0.4 s).
SAMPLE_ROWS = 4000


def principal_directions(sample: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(center, directions (d, min(n, d)) by decreasing variance, the share of the variance each
    direction holds) of the float64 ``sample``."""
    sample = np.asarray(sample, dtype=np.float64)
    center = sample.mean(axis=0)
    _, singular, directions = np.linalg.svd(sample - center, full_matrices=False)
    energy = singular ** 2
    total = float(energy.sum())
    return center, directions.T, (energy / total if total > 0 else np.zeros_like(energy))


def components_for(shares: np.ndarray, variance_kept: float) -> int:
    """The fewest leading directions whose ``shares`` sum to at least ``variance_kept``."""
    kept = np.cumsum(shares)
    return min(len(shares), int(np.searchsorted(kept, variance_kept - 1e-12)) + 1)


def kernel_agreement(sample: np.ndarray, projection: InputMap, kernel,
                     pairs: int = 1000) -> dict:
    """How close the projected kernel is to the raw one on ``pairs`` × ``pairs`` entries
    between the two halves of ``sample``: the mean relative absolute difference
    ``mean|k(Px, Pz) − k(x, z)| / mean k(x, z)`` and the largest absolute one."""
    half = min(pairs, sample.shape[0] // 2)
    first, second = sample[:half], sample[half:2 * half]
    raw = kernel.block(first, second)
    mapped = kernel.block(projection.projected(first), projection.projected(second))
    difference = np.abs(mapped - raw)
    return {"mean_relative_difference": float(difference.mean() / max(raw.mean(), 1e-300)),
            "largest_difference": float(difference.max())}


def fit_input_projection(sample, kernel, n_features: int,
                         variance_kept: float = VARIANCE_KEPT) -> tuple[InputMap | None, dict]:
    """(the map onto the principal directions of ``sample``, or None, and the report of the
    rule in the module docstring: ``features``, ``components``, ``variance_kept``, the
    :func:`kernel_agreement` of the sample, or the ``reason`` the rows keep their features).
    ``sample`` holds rows as the kernel takes them (scaled)."""
    report: dict[str, Any] = {"features": int(n_features)}
    if not kernel.radial:
        return None, {**report, "reason": f"the {kernel.name} kernel is not a function of "
                      "the Euclidean distance"}
    if sample is None or scipy.sparse.issparse(sample):
        return None, {**report, "reason": "sparse rows keep their features"}
    if n_features < MIN_FEATURES:
        return None, {**report, "reason": f"fewer than {MIN_FEATURES} features"}
    sample = np.asarray(sample, dtype=np.float64)
    most = int(n_features * MAX_SHARE)
    if sample.shape[0] < 2 * most:
        return None, {**report, "reason": f"a sample of {sample.shape[0]:,} rows is too few "
                                          "to estimate the directions"}
    center, directions, shares = principal_directions(sample)
    components = components_for(shares, variance_kept)
    report.update(components=components, variance_kept=float(shares[:components].sum()))
    if components > most:
        return None, {**report, "reason": f"{variance_kept:.0%} of the variance needs "
                                          f"{components} directions, more than a third of "
                                          f"the {n_features} features"}
    projection = InputMap(center=center, components=directions[:, :components].copy())
    report.update(kernel_agreement(sample, projection, kernel))
    return projection, report
