"""Data of any size for the benchmarks at scale: Fashion-MNIST grown by elastic deformations
(the MNIST8M / infiMNIST recipe), a seeded low-dimensional table in raw units, and a seeded
sparse bag-of-words text set (:func:`make_text`, 10^5+ term columns). All draw their rows in
seeded chunks, so any row range is the same however it is generated
(``benchmarks/make_big_data.py`` writes them: Parquet, and LIBSVM for the text)."""
from __future__ import annotations

import numpy as np

from ..core.errors import SettingsError
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
        raise SettingsError(f"rows {start}:{stop} are not a range of row numbers.")
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

    The label is :func:`sodm_spark.data.datasets.make_nonlinear`'s perturbed sphere in seven
    standard-normal latent columns (``‖z[:5]‖² + z5·z6 > 4.35``, ``label_noise`` of the labels
    flipped), but the features come in raw units: informative column j is
    ``offset + unit·z_j`` (:data:`TABULAR_UNITS`), and the remaining ``n_features − 7`` columns
    are noise of skewed shapes (log-normal amounts, Poisson counts, a 0/1 flag). Rows are drawn
    in chunks of :data:`TABULAR_CHUNK` seeded by their index, so a row range is the same however
    it is split; ``test=True`` draws from a separate stream (held-out rows).
    """
    if n_features < len(TABULAR_UNITS):
        raise SettingsError(f"make_tabular needs n_features >= {len(TABULAR_UNITS)}, "
                            f"got {n_features}.")
    if not 0 <= start <= stop:
        raise SettingsError(f"rows {start}:{stop} are not a range of row numbers.")
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


#: :func:`make_text`'s rows are drawn in chunks of this many documents, each seeded by its index.
TEXT_CHUNK = 10_000
#: Zipf exponent of the background term frequencies (word ranks in English text follow
#: frequency ∝ 1/rank^s with s ≈ 1), and of each topic's own terms.
ZIPF_EXPONENT = 1.07
#: Topics, the terms each one favours, and the share of a document's tokens drawn from its
#: topics rather than from the background. On 6,000 documents (exact ODM, λ = 1e6, 2,000 test
#: documents) these give the RBF kernel 0.69 and the linear kernel 0.51 test accuracy; with 16
#: topics of 3,000 terms and a share of 0.35 the topic pairs were too rare for either (0.57 and
#: 0.52).
TEXT_TOPICS, TOPIC_TERMS, TOPIC_SHARE = 8, 1000, 0.6
#: Tokens per document: log-normal around this median (its distinct terms: about 50-200).
TEXT_MEDIAN_TOKENS, TEXT_TOKENS_SIGMA = 130.0, 0.45


def _text_model(n_features: int, seed: int):
    """The generator's fixed parts, drawn from ``seed`` alone: the background term CDF, the
    topics' terms and CDF, the term → column map, the idf of each column, and the half of the
    topics each belongs to (±1, the label's XOR)."""
    rng = np.random.default_rng([seed, 41])
    ranks = np.arange(1, n_features + 1, dtype=np.float64)
    background = ranks ** -ZIPF_EXPONENT
    background /= background.sum()
    topic_ranks = np.arange(1, TOPIC_TERMS + 1, dtype=np.float64) ** -ZIPF_EXPONENT
    topic_ranks /= topic_ranks.sum()
    # each topic favours its own mid-frequency terms (not the stop words of the head)
    head = min(200, n_features // 10)
    pool = max(TOPIC_TERMS, n_features - head)
    topic_terms = np.stack([head + rng.choice(pool, TOPIC_TERMS, replace=False) % (n_features - head)
                            for _ in range(TEXT_TOPICS)])
    column_of_term = rng.permutation(n_features)  # a file's columns are in no frequency order
    token_share = (1 - TOPIC_SHARE) * background
    np.add.at(token_share, topic_terms.ravel(),
              TOPIC_SHARE / TEXT_TOPICS * np.tile(topic_ranks, TEXT_TOPICS))
    # a term's chance to occur in a document of typical length: what its idf would measure
    document_frequency = -np.expm1(-TEXT_MEDIAN_TOKENS * token_share)
    idf_of_column = np.empty(n_features)
    idf_of_column[column_of_term] = np.log(1.0 / np.maximum(document_frequency, 1e-12)) + 1.0
    half = np.where(rng.permutation(TEXT_TOPICS) < TEXT_TOPICS // 2, 1, -1)
    return (np.cumsum(background), np.cumsum(topic_ranks), topic_terms, column_of_term,
            idf_of_column, half)


def make_text(start: int, stop: int, seed: int = 0, n_features: int = 150_000,
              test: bool = False, label_noise: float = 0.03):
    """Rows ``start:stop`` of a seeded bag-of-words text set (CSR float64, ±1 labels).

    Documents have a log-normal number of tokens (median :data:`TEXT_MEDIAN_TOKENS`: 50-200
    distinct terms), each token drawn from a Zipf law over ``n_features`` terms (the
    background) or, for :data:`TOPIC_SHARE` of them, from one of the document's two topics
    (each a Zipf law over its own :data:`TOPIC_TERMS` mid-frequency terms; proportions w and
    1 − w, w ~ Beta(4, 4)). Values are tf-idf — (1 + log count) times the log inverse document
    frequency the generator implies — and rows have unit L2 norm, as text classifiers' inputs
    have. The label is +1 when the two topics lie in the same half of the topics (a seeded
    split), −1 otherwise (``label_noise`` of the labels flipped): an exclusive or of the
    topics' halves, which no weight per term can express (a term's weight cannot depend on
    the document's other topic) and a kernel between documents can. Columns are the terms in
    a seeded random order.
    Rows are drawn in chunks of :data:`TEXT_CHUNK` seeded by their index, so a row range is the
    same however it is split; ``test=True`` draws from a separate stream.
    """
    import scipy.sparse

    if n_features < 10 * TOPIC_TERMS:
        raise SettingsError(f"make_text needs n_features >= {10 * TOPIC_TERMS}, got {n_features}.")
    if not 0 <= start <= stop:
        raise SettingsError(f"rows {start}:{stop} are not a range of row numbers.")
    (background_cdf, topic_cdf, topic_terms, column_of_term, idf_of_column,
     half) = _text_model(n_features, seed)
    pieces, labels = [], []
    for chunk in range(start // TEXT_CHUNK, -(-stop // TEXT_CHUNK)):
        rng = np.random.default_rng([seed, 43, int(test), chunk])
        # two distinct topics a document, in proportions w and 1 − w (w ~ Beta(4, 4))
        first = rng.integers(TEXT_TOPICS, size=TEXT_CHUNK)
        second = (first + rng.integers(1, TEXT_TOPICS, size=TEXT_CHUNK)) % TEXT_TOPICS
        weight = rng.beta(4.0, 4.0, TEXT_CHUNK)
        proportions = np.zeros((TEXT_CHUNK, TEXT_TOPICS))
        proportions[np.arange(TEXT_CHUNK), first] = weight
        proportions[np.arange(TEXT_CHUNK), second] = 1.0 - weight
        lengths = np.clip(np.round(TEXT_MEDIAN_TOKENS * np.exp(
            TEXT_TOKENS_SIGMA * rng.standard_normal(TEXT_CHUNK))), 20, 1000).astype(np.int64)
        document = np.repeat(np.arange(TEXT_CHUNK), lengths)
        from_topic = rng.random(document.size) < TOPIC_SHARE
        # the topic of each topical token, drawn from its document's proportions
        cumulative = np.cumsum(proportions, axis=1)
        draws = rng.random(document.size)
        topic = np.minimum((draws[:, None] > cumulative[document]).sum(axis=1), TEXT_TOPICS - 1)
        term = np.minimum(np.searchsorted(background_cdf, rng.random(document.size)),
                          n_features - 1)
        topical_rank = np.minimum(np.searchsorted(topic_cdf, rng.random(document.size)),
                                  TOPIC_TERMS - 1)
        term[from_topic] = topic_terms[topic[from_topic], topical_rank[from_topic]]
        column = column_of_term[term]
        pairs, counts = np.unique(document * np.int64(n_features) + column, return_counts=True)
        rows, columns = pairs // n_features, pairs % n_features
        values = (1.0 + np.log(counts)) * idf_of_column[columns]
        X = scipy.sparse.csr_matrix((values, (rows, columns)), shape=(TEXT_CHUNK, n_features))
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        X = scipy.sparse.diags(1.0 / np.maximum(norms, 1e-300)) @ X
        y = _flip_labels(half[first] * half[second], rng, label_noise)
        lo, hi = max(start, chunk * TEXT_CHUNK), min(stop, (chunk + 1) * TEXT_CHUNK)
        keep = slice(lo - chunk * TEXT_CHUNK, hi - chunk * TEXT_CHUNK)
        pieces.append(X.tocsr()[keep])
        labels.append(y[keep])
    if not pieces:
        return scipy.sparse.csr_matrix((0, n_features)), np.empty(0, np.int64)
    return scipy.sparse.vstack(pieces, format="csr"), np.concatenate(labels)

