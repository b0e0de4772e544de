"""Partitioning numerics for SODM (pure numpy; Spark tasks call these on numpy blocks).

- :func:`select_landmarks` — landmarks by SODM Eqn (8) (pivoted incomplete Cholesky);
- :func:`nearest_landmark` — strata by SODM Eqn (7) (nearest landmark in the RKHS);
- :func:`stratum_offsets`, :func:`deal_positions` — deal every stratum evenly to K partitions;
- :func:`partitions_look_like_whole` — whether existing partitions already hold every
  stratum in its overall share (then nothing needs to move);
- :func:`nearest_center`, :func:`kmeans` — Euclidean k-means for the DC-ODM / DiP-ODM
  comparator partitioners.
"""
from .kmeans import kmeans
from .landmarks import select_landmarks
from .strata import (deal_positions, nearest_center, nearest_landmark,
                     partitions_look_like_whole, stratum_offsets)

__all__ = [
    "select_landmarks",
    "nearest_landmark",
    "nearest_center",
    "stratum_offsets",
    "deal_positions",
    "partitions_look_like_whole",
    "kmeans",
]
