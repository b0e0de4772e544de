"""Partitioning numerics for SODM (pure numpy; Spark tasks call these on numpy blocks).

- :func:`select_landmarks` — landmarks by SODM Eqn (8) (pivoted incomplete Cholesky);
- :func:`nearest_landmark` — strata by SODM Eqn (7) (nearest landmark in the RKHS);
- :func:`stratum_offsets`, :func:`deal_positions` — deal every stratum evenly to K partitions;
- :func:`nearest_center`, :func:`kmeans` — Euclidean k-means for the DC-ODM / DiP-ODM
  comparator partitioners.
"""
from .kmeans import kmeans
from .landmarks import select_landmarks
from .strata import deal_positions, nearest_center, nearest_landmark, stratum_offsets

__all__ = [
    "select_landmarks",
    "nearest_landmark",
    "nearest_center",
    "stratum_offsets",
    "deal_positions",
    "kmeans",
]
