"""Rows of the signed kernel matrix Q = diag(y) K diag(y) for the dual coordinate descent of
:mod:`.odm_dcd`: the whole matrix by blocked GEMM (its RBF epilogue fused), or rows on demand
behind an LRU cache of single rows; and the memory either needs. Rows may be dense or CSR
(:mod:`sodm_spark.core.sparse_rows`): sparse rows are laid out once for all their products, and
their memory is charged by stored values, not by the width."""
from __future__ import annotations

import numba
import numpy as np

from ..core.kernels import Kernel, operand_rows, rows_per_block
from ..core.resources import RESERVE_MB, available_memory_mb
from ..core.sparse_rows import as_float_rows, squared_norms
from . import _dcd_kernels as loops


class KernelRows:
    """Rows of Q = diag(y) K diag(y) on demand, with an LRU cache of single rows.

    Rows are cached one by one (not by fixed blocks), so the cache keeps the rows of the
    points that are still being updated whatever blocks they are visited in. The store
    (``cache_bytes``) is allocated when the first row is cached.
    """

    def __init__(self, kernel: Kernel, X: np.ndarray, y: np.ndarray, dtype, cache_bytes: float):
        self.kernel, self.dtype = kernel, np.dtype(dtype)
        # Converted once: every block's GEMM reads X in the cache's dtype (sparse rows: laid
        # out once as the right-hand side of every block's product)
        self.X = as_float_rows(X, self.dtype)
        self.operand = operand_rows(self.X, self.dtype)
        self.sq_norms = squared_norms(self.X)
        self.y = y.astype(self.dtype)
        m = self.X.shape[0]
        self.capacity = int(min(m, cache_bytes // max(1, m * self.dtype.itemsize)))
        self.store: np.ndarray | None = None
        self.slot_of = np.full(m, -1, dtype=np.int64)  # point -> slot, -1 when not cached
        self.owner = np.full(self.capacity, -1, dtype=np.int64)  # slot -> point
        self.last_used = np.zeros(self.capacity, dtype=np.int64)
        self.clock = 0
        self.computed_rows = 0

    def cached(self, index: np.ndarray) -> np.ndarray:
        """Which of the points ``index`` have their row cached."""
        return self.slot_of[index] >= 0

    def rows(self, index: np.ndarray) -> np.ndarray:
        """Q[index, :] (a new array): cached rows copied, the others computed by one GEMM.

        Callers list the cached points first (see :meth:`cached_first`): then both parts are
        written in place into the result, with no second B×m buffer.
        """
        self.clock += 1
        m = self.X.shape[0]
        out = np.empty((index.size, m), dtype=self.dtype)
        slots = self.slot_of[index]
        hit = slots >= 0
        n_hit = int(hit.sum())
        if n_hit and not hit[:n_hit].all():  # not a prefix: place the cached rows first
            order = np.argsort(~hit, kind="stable")
            rows = self.rows(index[order])
            out[order] = rows
            return out
        if n_hit:
            assert self.store is not None  # a cached row lives in the store
            np.take(self.store, slots[:n_hit], axis=0, out=out[:n_hit])
            self.last_used[slots[:n_hit]] = self.clock
        if n_hit < index.size:
            missing, fresh = index[n_hit:], out[n_hit:]
            self.kernel.block(self.X[missing], self.operand, z_sq_norms=self.sq_norms, out=fresh)
            fresh *= self.y[missing, None]
            fresh *= self.y[None, :]
            self.computed_rows += missing.size
            self._keep(missing, fresh)
        return out

    def cached_first(self, index: np.ndarray) -> np.ndarray:
        """``index`` with its cached points first, each part sorted (sequential row reads)."""
        hit = self.cached(index)
        return np.concatenate([np.sort(index[hit]), np.sort(index[~hit])])

    def _keep(self, points: np.ndarray, rows: np.ndarray) -> None:
        """Cache ``rows`` of ``points`` in free slots, then in the least recently used ones."""
        if self.capacity == 0:
            return
        if self.store is None:
            self.store = np.empty((self.capacity, self.X.shape[0]), dtype=self.dtype)
        n = min(points.size, self.capacity)
        # the n oldest slots (free ones have owner -1 and clock 0) not used by this call
        candidates = np.flatnonzero(self.last_used < self.clock)
        if candidates.size < n:
            n = candidates.size
        if n == 0:
            return
        oldest = candidates[np.argpartition(self.last_used[candidates], n - 1)[:n]] \
            if n < candidates.size else candidates
        evicted = self.owner[oldest]
        self.slot_of[evicted[evicted >= 0]] = -1
        self.store[oldest] = rows[:n]
        self.owner[oldest] = points[:n]
        self.slot_of[points[:n]] = oldest
        self.last_used[oldest] = self.clock


#: Kernel matrices of at least this many MB are prefaulted by several threads before they are
#: filled (:func:`prefaulted_empty`).
PREFAULT_MB = 256
#: Bytes of the smallest memory page (4 KB; a larger page is written several times, which
#: costs nothing).
PAGE_BYTES = 4096


def prefaulted_empty(shape, dtype, threads: int | None = None) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose pages are already mapped, by ``threads`` threads (None:
    the BLAS threads the caller runs with, at most numba's): a fresh array's pages are mapped
    on first write, at a few microseconds a 4 KB page on a virtual machine, and the kernel's
    fill writes them in a pattern (the mirrored lower triangle) that faults them one by one.
    Measured on 54,000 rows × 176 inputs (an 11.6 GB Q) after reading the data, two threads,
    this machine: the fill alone 24.3-32.3 s, prefaulted 11.3-19.8 s (the prefault 4.2-12.2 s
    of it); one thread gains nothing (23.8-26.3 s)."""
    array = np.empty(shape, dtype=dtype)
    if array.nbytes < PREFAULT_MB * 2**20:
        return array
    if threads is None:
        threads = _blas_threads()
    # numba.config sets its settings at import, from the environment: mypy sees none of them
    most = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    threads = max(1, min(int(threads), most))
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        loops.touch_pages(array.reshape(-1), max(1, PAGE_BYTES // array.itemsize))
    finally:
        numba.set_num_threads(previous)
    return array


def _blas_threads() -> int:
    """Threads the BLAS runs with here (a Spark task's ``threadpool_limits``), 1 if unknown."""
    from threadpoolctl import threadpool_info

    counts = [info.get("num_threads", 1) for info in threadpool_info()
              if info.get("user_api") == "blas"]
    return max(counts) if counts else 1


#: The fixed-point storage of a cached Q: int16 entries times one scale per matrix, half the
#: memory of float32 (docs/design.md §1.3). The scale is the largest kernel value over the
#: int16 range, so an entry is off by at most half a step: 1.5e-5 of the diagonal for the RBF
#: kernel, against float32's relative 6e-8. Measured with the job on 53,898 × 175 binary
#: Fashion-MNIST rows (level 0, one partition, local[2]): 28 sweeps against float32's 29, the
#: same test accuracy (0.9814), the level in 18 s against 28 s (fill and sweeps write and read
#: half the bytes).
FIXED_POINT = np.dtype(np.int16)


def fixed_point_scale(kernel: Kernel, X) -> float | None:
    """The scale of a fixed-point Q of ``X``'s rows: the largest |k(x_i, x_j)| over the int16
    range, where the largest diagonal value bounds it (:attr:`Kernel.bounded_by_diagonal
    <sodm_spark.core.kernels.Kernel.bounded_by_diagonal>`, a positive semi-definite kernel:
    |k(x, z)| ≤ √(k(x, x) k(z, z))); None for a kernel without that bound or a zero diagonal
    (such a Q is stored in float32)."""
    if not kernel.bounded_by_diagonal:
        return None
    largest = float(np.max(kernel.diagonal(X))) if X.shape[0] else 0.0
    if not np.isfinite(largest) or largest <= 0.0:
        return None
    return largest / loops.FIXED_POINT_STEPS


def full_q_matrix(kernel: Kernel, X: np.ndarray, y: np.ndarray | None, dtype=np.float32,
                  block_mb: float = 256.0, scale: float | None = None) -> np.ndarray:
    """Q = diag(y) K diag(y), filled block by block (the caller checked it fits); ``y`` None:
    the kernel matrix K itself (every sign +1: the joint multi-class solver's and the search's
    matrix, whose signs differ by class). ``dtype`` :data:`FIXED_POINT` stores Q / ``scale``
    rounded (:func:`fixed_point_scale`), its blocks computed in float32.

    Q is symmetric: each row block is computed only from its diagonal onwards (one GEMM), which
    halves the kernel work, and copied below the block in tiles.
    """
    m = X.shape[0]
    dtype = np.dtype(dtype)
    fixed = dtype == FIXED_POINT
    inverse_scale = 0.0  # what a fixed-point Q's entries are multiplied by when stored
    if fixed:
        if not (scale is not None and scale > 0.0):
            raise ValueError("a fixed-point Q needs its scale (fixed_point_scale).")
        inverse_scale = 1.0 / scale
    compute = np.dtype(np.float32) if fixed else dtype
    Q = prefaulted_empty((m, m), dtype)
    Xd = as_float_rows(X, compute)
    operand = operand_rows(Xd, compute)  # sparse rows: laid out once for every block
    sq_norms = squared_norms(Xd)
    yd = np.ones(m, dtype=compute) if y is None else y.astype(compute)
    # at least 8 row blocks: the work above the diagonal is then 9/16 of the whole product
    step = min(rows_per_block(m, compute.itemsize, block_mb), max(256, -(-m // 8)))
    buffer = np.empty(step * m, dtype=compute)
    for start in range(0, m, step):
        stop = min(start + step, m)
        block = buffer[:(stop - start) * (m - start)].reshape(stop - start, m - start)
        # one GEMM, then the kernel's own epilogue (rbf: one fused pass and numpy's exp)
        kernel.block(Xd[start:stop], operand, z_sq_norms=sq_norms[start:], out=block,
                     first_row=start)
        if fixed:
            loops.quantized_rows_into(Q, block, start, yd, inverse_scale, 64)
        else:
            loops.signed_rows_into(Q, block, start, yd, 0.0, 64)  # kernel.block added the offset
    return Q


def signed_kernel(K: np.ndarray, y: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Q = diag(y) K diag(y) from a kernel matrix already computed (a new array)."""
    if K.shape != (y.size, y.size):
        raise ValueError(f"the kernel matrix is {K.shape}, the problem has {y.size} rows.")
    yd = y.astype(dtype)
    Q = np.multiply(K, yd[:, None], dtype=dtype)
    Q *= yd[None, :]
    return Q


def kernel_mode_for(m: int, cache_mb: float, itemsize: int = 4) -> str:
    """'cached' when the whole m×m kernel matrix fits ``cache_mb``, else 'blocked'."""
    return "cached" if m * m * itemsize <= cache_mb * 2**20 else "blocked"


def kernel_fits_cache(m: int, n_features: float, cache_mb: float | None = None,
                      itemsize: int = 4) -> bool:
    """Whether the whole m×m kernel matrix fits ``cache_mb`` (None: what this machine can
    afford now, :func:`auto_cache_mb`; ``n_features`` as :func:`solver_memory_mb` takes it)."""
    if cache_mb is None:
        cache_mb = auto_cache_mb(m, n_features)
    return kernel_mode_for(m, cache_mb, itemsize) == "cached"


def auto_cache_mb(m: int, n_features: float) -> float:
    """The kernel cache a solve on this machine can afford: the memory available now, less
    the solver's own arrays and :data:`~sodm_spark.core.resources.RESERVE_MB`."""
    room = available_memory_mb() - RESERVE_MB - solver_memory_mb(m, n_features)
    return max(0.0, room)


def solver_memory_mb(m: int, n_features: float, block_size: int = 1024,
                     itemsize: int = 4) -> float:
    """Memory (MB) a blocked solve of m rows needs besides its kernel cache: the rows (float64),
    about six m-vectors, one block of kernel rows and its float64 GEMM scratch. For sparse rows
    ``n_features`` is their :func:`~sodm_spark.core.sparse_rows.memory_width`, not their width."""
    rows = min(block_size, m)
    return (m * n_features * 8 + 6 * m * 8 + rows * m * (itemsize + 8)) / 2**20
