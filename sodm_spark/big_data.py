"""Data of any size for the benchmarks at scale: Fashion-MNIST grown by elastic deformations
(the MNIST8M / infiMNIST recipe) and a seeded low-dimensional table in raw units. Both draw
their rows in seeded chunks, so any row range is the same however it is generated
(``benchmarks/make_big_data.py`` writes them as Parquet)."""
from __future__ import annotations

import numpy as np

from .datasets import (FASHION_MNIST_DIR, _flip_labels, _unavailable_without_package,
                       load_fashion_mnist)

#: Elastic deformations (Simard, Steinkraus & Platt, "Best practices for convolutional neural
#: networks applied to visual document analysis", 2003; the recipe MNIST8M / infiMNIST grow MNIST
#: with): a uniform random displacement field per image, smoothed by a Gaussian of ``sigma``
#: pixels and scaled by ``alpha``, plus a random shift of at most ``max_shift`` pixels, then
#: bilinear resampling. Simard's alpha = 34 with sigma = 6 instead of 4 (sigma = 4 twists shoes
#: and bags into shapes no photo has); pixels are quantized to bytes again, as infiMNIST writes.
DEFORM_ALPHA, DEFORM_SIGMA, DEFORM_SHIFT = 34.0, 6.0, 1.0
#: Deformed rows are drawn in chunks of this many, each seeded by its index: any row range is
#: the same whichever batches it is generated in.
DEFORM_CHUNK = 10_000


def elastic_deform(images: np.ndarray, rng, alpha: float = DEFORM_ALPHA,
                   sigma: float = DEFORM_SIGMA, max_shift: float = DEFORM_SHIFT) -> np.ndarray:
    """``images`` (n, h, w) in [0, 1] deformed (module constants above), quantized to k/255."""
    from scipy.ndimage import gaussian_filter, map_coordinates

    n, height, width = images.shape
    fields = rng.uniform(-1.0, 1.0, (2, n, height, width))
    fields = alpha * gaussian_filter(fields, sigma=(0, 0, sigma, sigma), mode="constant")
    shifts = rng.uniform(-max_shift, max_shift, (2, n, 1, 1))
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    coords = np.stack([np.broadcast_to(np.arange(n)[:, None, None], (n, height, width)),
                       rows + fields[0] + shifts[0], cols + fields[1] + shifts[1]])
    out = map_coordinates(images, coords, order=1, mode="constant", cval=0.0)
    return np.round(np.clip(out, 0.0, 1.0) * 255.0) / 255.0


def deformed_fashion_mnist(start: int, stop: int, seed: int = 0, binary: bool = True,
                           root=None) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of Fashion-MNIST grown by elastic deformations (float32 pixels).

    Rows 0-59,999 are the training images themselves; row r beyond them is a deformation of
    training image ``r % 60000`` (:func:`elastic_deform`, seeded by ``seed`` and r's chunk of
    :data:`DEFORM_CHUNK` rows), with its label (±1 even vs odd classes, or 0-9). The test
    images stay untouched: score on ``load_fashion_mnist("test")``.
    """
    if not 0 <= start <= stop:
        raise ValueError(f"rows {start}:{stop} are not a range of row numbers.")
    with _unavailable_without_package():
        X, y = load_fashion_mnist("train", root or FASHION_MNIST_DIR, binary=binary)
    originals = X.shape[0]
    pieces, labels = [], []
    first_chunk = start // DEFORM_CHUNK
    for chunk in range(first_chunk, -(-stop // DEFORM_CHUNK)):
        lo, hi = max(start, chunk * DEFORM_CHUNK), min(stop, (chunk + 1) * DEFORM_CHUNK)
        source = np.arange(chunk * DEFORM_CHUNK, (chunk + 1) * DEFORM_CHUNK) % originals
        images = X[source].reshape(-1, 28, 28)
        if chunk * DEFORM_CHUNK >= originals:
            images = elastic_deform(images, np.random.default_rng([seed, 29, chunk]))
        keep = slice(lo - chunk * DEFORM_CHUNK, hi - chunk * DEFORM_CHUNK)
        pieces.append(images.reshape(-1, 784)[keep].astype(np.float32))
        labels.append(y[source][keep])
    if not pieces:
        return np.empty((0, 784), np.float32), np.empty(0, y.dtype)
    return np.concatenate(pieces), np.concatenate(labels)


#: The columns of :func:`make_tabular` in raw units: (offset, unit) per informative column.
#: Their spreads differ by six orders of magnitude, as a table's (metres, grams, counts) do.
TABULAR_UNITS = ((0.0, 1.0), (1e3, 250.0), (-5.0, 0.01), (40.0, 12.0), (0.0, 1e4),
                 (7.5, 0.5), (2e5, 3e3))
TABULAR_CHUNK = 100_000


def make_tabular(start: int, stop: int, seed: int = 0, n_features: int = 12,
                 test: bool = False, label_noise: float = 0.05):
    """Rows ``start:stop`` of a seeded low-dimensional table of any length (float32, ±1 labels).

    The label is :func:`sodm_spark.datasets.make_nonlinear`'s perturbed sphere in seven standard-normal latent
    columns (``‖z[:5]‖² + z5·z6 > 4.35``, ``label_noise`` of the labels flipped), but the
    features come in raw units: informative column j is ``offset + unit·z_j``
    (:data:`TABULAR_UNITS`), and the remaining ``n_features − 7`` columns are noise of skewed
    shapes (log-normal amounts, Poisson counts, a 0/1 flag). Rows are drawn in chunks of
    :data:`TABULAR_CHUNK` seeded by their index, so a row range is the same however it is
    split; ``test=True`` draws from a separate stream (held-out rows).
    """
    if n_features < len(TABULAR_UNITS):
        raise ValueError(f"make_tabular needs n_features >= {len(TABULAR_UNITS)}, "
                         f"got {n_features}.")
    if not 0 <= start <= stop:
        raise ValueError(f"rows {start}:{stop} are not a range of row numbers.")
    informative = len(TABULAR_UNITS)
    offsets, units = (np.array(column) for column in zip(*TABULAR_UNITS))
    pieces, labels = [], []
    for chunk in range(start // TABULAR_CHUNK, -(-stop // TABULAR_CHUNK)):
        rng = np.random.default_rng([seed, 37, int(test), chunk])
        z = rng.standard_normal((TABULAR_CHUNK, informative))
        score = np.einsum("ij,ij->i", z[:, :5], z[:, :5]) + z[:, 5] * z[:, 6] - 4.35
        y = _flip_labels(np.where(score > 0, 1, -1), rng, label_noise)
        noise = np.empty((TABULAR_CHUNK, n_features - informative))
        for j in range(noise.shape[1]):
            kind = j % 3
            noise[:, j] = (rng.lognormal(3.0, 1.0, TABULAR_CHUNK) if kind == 0 else
                           rng.poisson(4.0, TABULAR_CHUNK) if kind == 1 else
                           rng.random(TABULAR_CHUNK) < 0.3)
        X = np.concatenate([offsets + units * z, noise], axis=1)
        lo, hi = max(start, chunk * TABULAR_CHUNK), min(stop, (chunk + 1) * TABULAR_CHUNK)
        keep = slice(lo - chunk * TABULAR_CHUNK, hi - chunk * TABULAR_CHUNK)
        pieces.append(X[keep].astype(np.float32))
        labels.append(y[keep])
    if not pieces:
        return np.empty((0, n_features), np.float32), np.empty(0, np.int64)
    return np.concatenate(pieces), np.concatenate(labels)
