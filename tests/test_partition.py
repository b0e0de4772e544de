"""Partition numerics: landmarks (Eqn 8), strata (Eqn 7), even dealing, k-means."""
import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from sodm_spark.core.kernels import Kernel, kernel_matrix
from sodm_spark.partition import (deal_positions, kmeans, nearest_center, nearest_landmark,
                                  partitions_look_like_whole,
                                  select_landmarks, stratum_offsets)
from sodm_spark.partition.kmeans import _lloyd

pytestmark = pytest.mark.numerics  # rerun under other BLAS kernels: tests/test_blas_kernels.py

KERNELS = {
    "rbf": Kernel.create("rbf", gamma=0.2),
    "poly": Kernel.create("poly", gamma=0.5, degree=2, coef0=1.0),
    "linear": Kernel.create("linear"),
    "laplacian": Kernel.create("laplacian", gamma=0.3),
}


def brute_force_greedy_det(K: np.ndarray, n_landmarks: int) -> list[int]:
    """Greedy determinant maximization: at each step the candidate maximizing det K[S+j, S+j].

    Ties (within rounding, e.g. the constant rbf diagonal at the first step) go to the first
    index, as in ``select_landmarks``.
    """
    chosen: list[int] = []
    for _ in range(n_landmarks):
        dets = np.full(K.shape[0], -np.inf)
        for j in range(K.shape[0]):
            if j not in chosen:
                idx = chosen + [j]
                dets[j] = np.linalg.det(K[np.ix_(idx, idx)])
        chosen.append(int(np.flatnonzero(dets >= dets.max() * (1 - 1e-9))[0]))
    return chosen


# ---------------------------------------------------------------- landmarks (Eqn 8)

@pytest.mark.parametrize("name", ["rbf", "poly", "linear", "laplacian"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_landmarks_equal_brute_force_greedy_determinant(name, seed):
    X = np.random.default_rng(seed).normal(size=(12, 6))
    kernel = KERNELS[name]
    expected = brute_force_greedy_det(kernel_matrix(kernel, X), 5)
    chosen = select_landmarks(X, kernel, 5)
    assert chosen.dtype == np.int64
    assert chosen.tolist() == expected


def test_first_rbf_landmark_is_row_zero_and_first_poly_landmark_has_largest_norm():
    X = np.random.default_rng(3).normal(size=(30, 4))
    assert select_landmarks(X, KERNELS["rbf"], 1).tolist() == [0]
    assert select_landmarks(X, KERNELS["poly"], 1).tolist() == [int(np.argmax((X ** 2).sum(1)))]


def test_linear_kernel_in_three_dimensions_stops_at_rank_three():
    X = np.random.default_rng(4).normal(size=(40, 3))
    chosen = select_landmarks(X, KERNELS["linear"], 10)
    assert len(chosen) == 3 and len(set(chosen.tolist())) == 3
    assert np.linalg.matrix_rank(X[chosen]) == 3
    # rows of rank 2 in 5 dimensions: two landmarks only
    Y = np.random.default_rng(5).normal(size=(25, 2)) @ np.random.default_rng(6).normal(size=(2, 5))
    assert len(select_landmarks(Y, KERNELS["linear"], 10)) == 2


@pytest.mark.parametrize("name", ["rbf", "poly", "laplacian"])
def test_duplicate_rows_are_never_chosen_twice(name):
    rng = np.random.default_rng(7)
    distinct = rng.normal(size=(6, 4))
    X = np.vstack([distinct] * 4)[rng.permutation(24)]
    chosen = select_landmarks(X, KERNELS[name], 15)
    assert len(chosen) == 6  # rank exhausted: early stop
    assert len(np.unique(X[chosen], axis=0)) == 6
    # asking for fewer than the distinct count also picks distinct rows
    few = select_landmarks(X, KERNELS[name], 4)
    assert len(few) == 4 and len(np.unique(X[few], axis=0)) == 4


def test_landmark_count_is_capped_by_rows_and_zero_data_gives_one_landmark():
    X = np.random.default_rng(8).normal(size=(5, 8))
    assert sorted(select_landmarks(X, KERNELS["rbf"], 50).tolist()) == [0, 1, 2, 3, 4]
    assert select_landmarks(np.zeros((4, 3)), KERNELS["linear"], 3).tolist() == [0]


# ---------------------------------------------------------------- strata (Eqn 7)

@pytest.mark.parametrize("name", sorted(KERNELS))
def test_nearest_landmark_equals_brute_force_rkhs_distance(name):
    rng = np.random.default_rng(9)
    kernel = KERNELS[name]
    X = rng.normal(size=(300, 5))
    Z = X[select_landmarks(X[:100], kernel, 7)]
    dist = (np.diag(kernel_matrix(kernel, X))[:, None] + np.diag(kernel_matrix(kernel, Z))[None, :]
            - 2.0 * kernel_matrix(kernel, X, Z))
    expected = np.argmin(dist, axis=1)
    tiny_budget = 7 * 8 * 16 / 2**20  # 16 rows per block -> 19 blocks
    for block_mb in (64.0, tiny_budget):
        strata = nearest_landmark(X, Z, kernel, block_mb=block_mb)
        assert strata.dtype == np.int64
        np.testing.assert_array_equal(strata, expected)


def test_each_landmark_falls_in_its_own_stratum():
    X = np.random.default_rng(10).normal(size=(200, 3))
    idx = select_landmarks(X, KERNELS["rbf"], 12)
    np.testing.assert_array_equal(nearest_landmark(X[idx], X[idx], KERNELS["rbf"]),
                                  np.arange(len(idx)))


def test_nearest_center_equals_cdist_argmin():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(500, 6)).astype(np.float32)
    C = rng.normal(size=(9, 6))
    expected = np.argmin(cdist(X, C), axis=1)
    for block_mb in (64.0, 9 * 8 * 50 / 2**20):
        np.testing.assert_array_equal(nearest_center(X, C, block_mb=block_mb), expected)
    labels, sq = nearest_center(X, C, return_distances=True)
    np.testing.assert_array_equal(labels, expected)
    np.testing.assert_allclose(sq, cdist(X, C, "sqeuclidean").min(axis=1), rtol=1e-9, atol=1e-9)


def test_empty_blocks_give_empty_strata():
    Z = np.ones((3, 4))
    assert nearest_landmark(np.empty((0, 4)), Z, KERNELS["rbf"]).shape == (0,)
    assert nearest_center(np.empty((0, 4)), Z).shape == (0,)
    assert deal_positions(np.empty(0, dtype=np.int64), np.zeros(3, np.int64), 0).shape == (0,)


# ---------------------------------------------------------------- dealing

STRATUM_SIZES = [1, 5, 40, 100, 333, 13, 2, 0, 61]


def reference_offsets(counts):
    """Independent loop: stratum by stratum, block by block."""
    offsets = np.zeros_like(counts)
    position = 0
    for s in range(counts.shape[1]):
        for j in range(counts.shape[0]):
            offsets[j, s] = position
            position += counts[j, s]
    return offsets


def dealt(seed, n_blocks=5):
    """Strata of all rows, split into uneven input blocks, and every row's dealt position."""
    rng = np.random.default_rng(12)
    strata = rng.permutation(np.repeat(np.arange(len(STRATUM_SIZES)), STRATUM_SIZES))
    cuts = np.sort(rng.choice(np.arange(1, strata.size), n_blocks - 1, replace=False))
    blocks = np.split(strata, cuts)
    counts = np.stack([np.bincount(b, minlength=len(STRATUM_SIZES)) for b in blocks])
    offsets = stratum_offsets(counts)
    np.testing.assert_array_equal(offsets, reference_offsets(counts))
    positions = [deal_positions(b, offsets[j], seed=[seed, j]) for j, b in enumerate(blocks)]
    return strata, np.concatenate(positions)


def test_positions_are_a_permutation_and_each_stratum_is_one_run():
    strata, positions = dealt(seed=3)
    assert positions.dtype == np.int64
    np.testing.assert_array_equal(np.sort(positions), np.arange(strata.size))
    start = 0
    for s, size in enumerate(STRATUM_SIZES):
        np.testing.assert_array_equal(np.sort(positions[strata == s]), np.arange(start, start + size))
        start += size


@pytest.mark.parametrize("K", [9, 27])
def test_every_partition_gets_an_even_share_of_every_stratum(K):
    strata, positions = dealt(seed=3)
    target = positions % K
    per_partition = np.zeros((K, len(STRATUM_SIZES)), dtype=int)
    np.add.at(per_partition, (target, strata), 1)
    for s, size in enumerate(STRATUM_SIZES):
        assert np.all(np.abs(per_partition[:, s] - size / K) < 1), (s, per_partition[:, s])
    sizes = per_partition.sum(axis=1)
    assert np.all(np.abs(sizes - strata.size / K) < 1) and sizes.max() - sizes.min() <= 1


def test_dealing_is_seeded_and_shuffles_within_strata():
    strata, first = dealt(seed=3)
    _, again = dealt(seed=3)
    _, other = dealt(seed=4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    # inside one block, a stratum's positions are not in row order
    block = np.zeros(200, dtype=np.int64)
    positions = deal_positions(block, np.array([10]), seed=0)
    np.testing.assert_array_equal(np.sort(positions), np.arange(10, 210))
    assert not np.array_equal(positions, np.arange(10, 210))


# ---------------------------------------------------------------- k-means

def inertia(X, centers):
    return cdist(X, centers, "sqeuclidean").min(axis=1).sum()


def test_kmeans_recovers_well_separated_blob_centers():
    X, _, true_centers = make_blobs(n_samples=800, centers=6, cluster_std=0.4,
                                    center_box=(-20, 20), random_state=0, return_centers=True)
    for seed in range(3):
        centers = kmeans(X, 6, seed=seed)
        assert centers.shape == (6, 2)
        distance = cdist(true_centers, centers)
        assert np.all(distance.min(axis=1) < 0.15)  # every true center found ...
        assert len(set(distance.argmin(axis=1))) == 6  # ... by a different center


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kmeans_inertia_matches_scikit_learn(seed):
    X, _ = make_blobs(n_samples=1500, centers=8, n_features=5, cluster_std=1.5,
                      random_state=seed)
    ours = inertia(X, kmeans(X, 8, seed=seed))
    reference = KMeans(n_clusters=8, n_init=1, random_state=seed).fit(X).inertia_
    assert ours <= 1.01 * reference


def test_kmeans_is_seeded():
    X, _ = make_blobs(n_samples=300, centers=4, cluster_std=2.0, random_state=5)
    np.testing.assert_array_equal(kmeans(X, 4, seed=[1, 2]), kmeans(X, 4, seed=[1, 2]))
    assert not np.array_equal(kmeans(X, 4, seed=1), kmeans(X, 4, seed=2))


def test_empty_cluster_is_reseeded_with_the_farthest_point():
    X = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [10.0, 0.0], [10.2, 0.0]])
    start = np.array([[5.0, 0.0], [100.0, 100.0]])  # the second center wins no row
    centers = _lloyd(X, start, max_iter=1, shift_tol=0.0)
    # every row is nearest to center 0; the row farthest from it, (10.2, 0), re-seeds center 1
    np.testing.assert_allclose(centers[1], X[4])
    np.testing.assert_allclose(centers[0], X[:4].mean(axis=0))
    final = _lloyd(X, start, max_iter=50, shift_tol=0.0)
    np.testing.assert_allclose(np.sort(final[:, 0]), [X[:3, 0].mean(), 10.1])


def test_kmeans_with_duplicates_and_one_cluster_per_row():
    X = np.repeat(np.array([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]]), 10, axis=0)
    centers = kmeans(X, 3, seed=0)
    np.testing.assert_allclose(np.sort(centers[:, 0]), [0.0, 1.0, 5.0])
    Y = np.random.default_rng(13).normal(size=(7, 3))
    assert inertia(Y, kmeans(Y, 7, seed=0)) == pytest.approx(0.0, abs=1e-20)
    assert np.all(np.isfinite(kmeans(X, 5, seed=0)))  # more clusters than distinct rows


# ---------------------------------------------------------------- bad inputs

def test_bad_inputs_are_refused_with_clear_messages():
    X = np.random.default_rng(14).normal(size=(10, 3))
    rbf = KERNELS["rbf"]
    with pytest.raises(ValueError, match="n_landmarks must be at least 1"):
        select_landmarks(X, rbf, 0)
    with pytest.raises(ValueError, match="n_landmarks must be an integer"):
        select_landmarks(X, rbf, 2.5)
    with pytest.raises(ValueError, match="empty"):
        select_landmarks(np.empty((0, 3)), rbf, 2)
    with pytest.raises(ValueError, match="2-D"):
        select_landmarks(X[0], rbf, 2)
    with pytest.raises(ValueError, match="NaN or infinity"):
        select_landmarks(np.where(X > 1.5, np.nan, X), rbf, 2)
    with pytest.raises(ValueError, match="X has 3 features but landmarks has 4"):
        nearest_landmark(X, np.ones((2, 4)), rbf)
    with pytest.raises(ValueError, match="landmarks is empty"):
        nearest_landmark(X, np.empty((0, 3)), rbf)
    with pytest.raises(ValueError, match="X has 3 features but centers has 2"):
        nearest_center(X, np.ones((2, 2)))
    with pytest.raises(ValueError, match="n_clusters must be at least 1"):
        kmeans(X, 0, seed=0)
    with pytest.raises(ValueError, match="n_clusters=11 exceeds the number of rows"):
        kmeans(X, 11, seed=0)
    with pytest.raises(ValueError, match="empty"):
        kmeans(np.empty((0, 3)), 2, seed=0)
    with pytest.raises(ValueError, match="non-negative integers"):
        stratum_offsets(np.array([[1, -2]]))
    with pytest.raises(ValueError, match="2-D"):
        stratum_offsets(np.array([1, 2]))
    with pytest.raises(ValueError, match=r"strata must lie in \[0, 2\)"):
        deal_positions(np.array([0, 2]), np.array([0, 5]), seed=0)


def test_random_splits_look_like_the_whole_and_sorted_or_clustered_ones_do_not():
    rng = np.random.default_rng(8)
    strata = rng.choice(6, size=40_000, p=[0.4, 0.3, 0.15, 0.1, 0.04, 0.01])

    def counts(parts):
        return np.stack([np.bincount(strata[p], minlength=6) for p in parts])

    random_split = np.array_split(rng.permutation(strata.size), 4)
    assert partitions_look_like_whole(counts(random_split))
    sorted_split = np.array_split(np.argsort(strata, kind="stable"), 4)
    assert not partitions_look_like_whole(counts(sorted_split))
    # a mild skew: one partition misses a third of its share of stratum 1 (≈ 800 rows short)
    skewed = counts(random_split)
    skewed[0, 1] -= 800
    skewed[0, 0] += 800
    assert not partitions_look_like_whole(skewed)
    # exactly proportional counts pass; an all-empty table does not
    assert partitions_look_like_whole(np.array([[30, 10], [60, 20]]))
    assert not partitions_look_like_whole(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="2-D"):
        partitions_look_like_whole(np.ones(3))
