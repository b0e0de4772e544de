"""Scoring rows with a kernel model in float32 where it cannot change a prediction, one block
of support vectors at a time; pure numpy, no Spark.

Kernel blocks against the support set are one GEMM each; float32 halves their time. A
float32 kernel entry is off by at most a few units of float32 rounding relative to the
entry's terms, so a row's score is off by at most about ``slack · Σ_i |α_i| k(x, z_i)`` for
the stationary kernels, whose values are positive (:attr:`Kernel.stationary
<sodm_spark.core.kernels.Kernel.stationary>`: rbf, laplacian, matern; computed with the scores,
one more column of the same product; a compressed model's coefficients cancel, Σ_i |α_i| is
10^5 times |f|, and the row's own sum is what keeps its bound small), ``FLOAT32_SLACK ·
Σ_i |α_i|`` times the largest |k| otherwise. For the radial kernels (rbf, matern) the slack is
the row's own (:func:`radial_slack`): the error of the squared distance ‖x‖² + ‖z‖² − 2xᵀz,
times the kernel's :attr:`~sodm_spark.core.kernels.Kernel.distance_sensitivity` (γ for rbf);
elsewhere the fixed :data:`FLOAT32_SLACK`. The products k · α are summed in float64. Rows
whose decision is closer to a boundary than twice that bound (|f| for
two classes, the gap between the two largest scores for more) are scored again in float64,
so the predictions are those of a float64 scoring.

A :class:`SupportSet` scores a batch against blocks of at most ``SV_BLOCK_BYTES`` of support
vectors and sums the partial decision values, so the memory it needs is one batch, one
support-vector block and one (batch × block) kernel block, whatever the model's size. Its
arrays may be files (:meth:`SupportSet.save`, :class:`NpyRows`): the support vectors stored
as float32 plus their float32 rounding residual (the float64 pass adds it back: exact to
2⁻⁴⁸ relative), mapped a block at a time, so the OS page cache shares them between processes.
Sparse (CSR) support vectors are stored as their CSR arrays (:class:`CsrRows`; values in
float64), and rows to score may be CSR too: a block is then a sparse product
(:mod:`sodm_spark.core.sparse_rows`), never as wide as the features.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numba
import numpy as np
import scipy.sparse

from ..core.errors import InputError
from ..core.kernels import Kernel
from ..core.sparse_rows import as_float_rows, squared_norms

# relative error of a float32 kernel entry, generously: the squared distance
# ‖x‖² + ‖z‖² − 2xᵀz loses digits to cancellation before exp
FLOAT32_SLACK = 1e-4
UNIT_ROUNDOFF_32 = 2.0 ** -24
# rbf: a float32 inner product of t terms errs by about √t unit roundoffs relative to the sum of
# its terms' magnitudes (rounding errors add like a random walk: Higham & Mary, "A new approach
# to probabilistic rounding error analysis", SIAM J. Sci. Comput. 2019), times this margin; the
# exp and the rounding of x and z to float32 add a few more. Measured on the compressed model of
# 600,000 Fashion-MNIST rows (100 inputs): the largest error of f was 1.1e-7 of Σ|α|k, the
# bound 1e-5; on 784 pixels the bound is about FLOAT32_SLACK
ROUNDING_MARGIN = 8.0
PRECISIONS = ("float32", "float64")
# at most this many bytes of support vectors, and of kernel entries, per block
SV_BLOCK_BYTES = 64 << 20
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}


class NpyRows:
    """The rows of a 2-d C-order ``.npy`` file; ``rows[a:b]`` maps just those rows.

    Mapping a block at a time (not the whole file, as ``np.load(mmap_mode="r")`` does) keeps
    a process's address space to one block, which matters where it is capped
    (``spark.executor.pyspark.memory`` sets RLIMIT_AS); the pages are the OS page cache's.
    """

    def __init__(self, path: str):
        with open(path, "rb") as file:
            read_header = _NPY_HEADERS.get(np.lib.format.read_magic(file))
            if read_header is None:
                raise InputError(f"{path}: unsupported .npy format version; write it with "
                                 "numpy.save.")
            shape, fortran, dtype = read_header(file)
            self.offset = file.tell()
        if len(shape) != 2 or fortran:
            raise InputError(f"{path}: expected a 2-d C-order array, found shape {shape}"
                             f"{' in Fortran order' if fortran else ''}.")
        self.path, self.shape, self.dtype = path, tuple(shape), np.dtype(dtype)

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(self.shape[0])
        if stop <= start:
            return np.empty((0, self.shape[1]), self.dtype)
        row_bytes = self.shape[1] * self.dtype.itemsize
        return np.memmap(self.path, self.dtype, "r", offset=self.offset + start * row_bytes,
                         shape=(stop - start, self.shape[1]))


class CsrRows:
    """CSR rows kept as three 1-d ``.npy`` files (values, column indices, row pointers), mapped
    (not read) when opened; ``rows[a:b]`` is those rows as a CSR matrix."""

    def __init__(self, paths: dict, shape):
        self.data, self.indices, self.indptr = (np.load(paths[name], mmap_mode="r")
                                                for name in ("data", "indices", "indptr"))
        self.shape = tuple(int(n) for n in shape)
        if self.indptr.size != self.shape[0] + 1 or self.data.size != self.indices.size:
            raise InputError(f"the sparse support-vector files {sorted(paths.values())} "
                             "disagree in shape; score again (they are rewritten every run).")

    def __getitem__(self, rows: slice):
        start, stop, _ = rows.indices(self.shape[0])
        stop = max(start, stop)
        first, last = int(self.indptr[start]), int(self.indptr[stop])
        return scipy.sparse.csr_matrix(
            (np.asarray(self.data[first:last]), np.asarray(self.indices[first:last]),
             np.asarray(self.indptr[start:stop + 1]) - first), shape=(stop - start, self.shape[1]))


@dataclass(frozen=True)
class SupportSet:
    """A kernel expansion as the scorer reads it: in blocks of support-vector rows.

    ``vectors`` (N, d) and ``coef`` (N, K) are arrays or :class:`NpyRows` (``vectors`` may be
    CSR, or :class:`CsrRows`); ``residual``, if
    given, is added to ``vectors`` in the float64 pass (their float32 rounding error).
    ``coef_l1`` (max over outputs of Σ|coef|), ``diagonal_max`` (max |k(z, z)| over the
    support vectors, 1 for a stationary kernel) and ``sq_norm_max`` (max ‖z‖², a radial
    kernel) size the float32 error bound.
    """

    vectors: Any
    coef: Any
    kernel: Kernel
    intercept: np.ndarray | None
    coef_l1: float
    diagonal_max: float
    residual: Any = None
    sq_norm_max: float = 0.0

    @classmethod
    def from_arrays(cls, support_vectors, coef, kernel: Kernel, intercept=None) -> "SupportSet":
        coef = np.asarray(coef, dtype=np.float64).reshape(support_vectors.shape[0], -1)
        diagonal = 1.0
        if not kernel.stationary and support_vectors.shape[0]:
            diagonal = float(np.abs(kernel.diagonal(support_vectors)).max())
        sq_norm_max = float(squared_norms(support_vectors, np.float64).max()) \
            if kernel.radial and support_vectors.shape[0] else 0.0
        return cls(support_vectors, coef, kernel,
                   None if intercept is None else np.asarray(intercept, np.float64).ravel(),
                   float(np.abs(coef).sum(axis=0).max()) if coef.size else 0.0, diagonal,
                   sq_norm_max=sq_norm_max)

    def save(self, folder: str, prefix: str = "") -> dict:
        """Write ``{prefix}vectors.npy`` (float32), ``{prefix}residual.npy`` (float32; only if
        some vector is not a float32 number) and ``{prefix}coef.npy`` (float64) to ``folder``,
        a block at a time; return the plain dict :meth:`open` takes (file names, no paths)."""
        n, d = self.vectors.shape
        spec = {"kernel": self.kernel.to_dict(),
                "intercept": None if self.intercept is None else self.intercept.tolist(),
                "coef_l1": self.coef_l1, "diagonal_max": self.diagonal_max,
                "sq_norm_max": self.sq_norm_max}
        if scipy.sparse.issparse(self.vectors):  # its CSR arrays, the values exact
            csr = self.vectors.tocsr()
            names = {part: f"{prefix}sv_{part}.npy" for part in ("data", "indices", "indptr")}
            for part, array in (("data", csr.data.astype(np.float64)),
                                ("indices", csr.indices), ("indptr", csr.indptr)):
                np.save(os.path.join(folder, names[part]), array)
            names["coef"] = f"{prefix}coef.npy"
            np.save(os.path.join(folder, names["coef"]), np.asarray(self.coef, dtype=np.float64))
            return {**spec, "names": names, "shape": [n, d]}
        names = {part: f"{prefix}{part}.npy" for part in ("vectors", "residual", "coef")}
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                  "fortran_order": False, "shape": (n, d)}
        step = max(1, SV_BLOCK_BYTES // (8 * max(d, 1)))
        inexact = False
        with open(os.path.join(folder, names["vectors"]), "wb") as high_file, \
                open(os.path.join(folder, names["residual"]), "wb") as low_file:
            for file in (high_file, low_file):
                np.lib.format.write_array_header_1_0(file, header)
            for start in range(0, n, step):
                exact = np.asarray(self.vectors[start:start + step], dtype=np.float64)
                high = exact.astype(np.float32)
                if not np.isfinite(high).all():
                    raise InputError("a support vector has a value beyond float32's range "
                                     "(|x| > 3.4e38); scale the features and retrain.")
                low = (exact - high).astype(np.float32)
                inexact = inexact or bool(low.any())
                high_file.write(high.tobytes())
                low_file.write(low.tobytes())
        if not inexact:
            os.remove(os.path.join(folder, names["residual"]))
        np.save(os.path.join(folder, names["coef"]), np.asarray(self.coef, dtype=np.float64))
        # no residual file when every vector is a float32 number: open() reads None as none
        return {**spec, "names": {**names, "residual": names["residual"] if inexact else None}}

    @classmethod
    def open(cls, spec: dict, locate: Callable[[str], str] = lambda name: name) -> "SupportSet":
        """The set :meth:`save` wrote, its files found by ``locate(name)`` and mapped a block
        at a time."""
        names = spec["names"]
        coef = NpyRows(locate(names["coef"]))
        vectors: CsrRows | NpyRows
        if "data" in names:
            vectors = CsrRows({part: locate(names[part]) for part in ("data", "indices", "indptr")},
                              spec["shape"])
            residual = None
        else:
            vectors = NpyRows(locate(names["vectors"]))
            residual = NpyRows(locate(names["residual"])) if names["residual"] else None
        mismatch = residual is not None and residual.shape != vectors.shape
        if coef.shape[0] != vectors.shape[0] or mismatch:
            raise InputError(f"the support-vector files {sorted(filter(None, names.values()))} "
                             "disagree in shape; score again (they are rewritten every run).")
        intercept = spec["intercept"]
        return cls(vectors, coef, Kernel.from_dict(spec["kernel"]),
                   None if intercept is None else np.asarray(intercept, np.float64),
                   float(spec["coef_l1"]), float(spec["diagonal_max"]), residual,
                   float(spec.get("sq_norm_max", 0.0)))

    def raw_scores(self, X, precision: str = "float32",
                   block_bytes: int | None = None) -> tuple[np.ndarray, int]:
        """(scores (n, K) float64 with the intercept — K = 1 for two classes —, how many rows
        were re-scored in float64)."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, "
                             f"got {precision!r}.")
        block_bytes = block_bytes or SV_BLOCK_BYTES
        if self.kernel.name == "linear":  # a weight vector: one dot product per row
            precision = "float64"
        shift = 0.0 if self.intercept is None else self.intercept.reshape(1, -1)
        # positive kernels: each row's own bound, slack · max over outputs of Σ_i |α_i| k(x, z_i)
        weighted = precision == "float32" and self.kernel.stationary \
            and self.kernel.offset >= 0
        scores, weights = self._sum(X, np.dtype(precision), block_bytes, weighted)
        scores += shift
        rescored = 0
        if precision == "float32" and X.shape[0]:
            if weighted:
                sensitivity = self.kernel.distance_sensitivity
                slack = FLOAT32_SLACK if sensitivity is None else \
                    radial_slack(X, sensitivity, self.sq_norm_max)
                bound = slack * weights
            else:
                scale = 1.0
                if not self.kernel.stationary:
                    scale = max(1.0, float(np.abs(self.kernel.diagonal(X)).max()),
                                self.diagonal_max)
                bound = FLOAT32_SLACK * scale * (1.0 + abs(self.kernel.offset)) * self.coef_l1
            if scores.shape[1] == 1:
                margin = np.abs(scores[:, 0])
            else:
                top2 = np.partition(scores, scores.shape[1] - 2, axis=1)[:, -2:]
                margin = top2[:, 1] - top2[:, 0]
            near = np.flatnonzero(margin <= 2.0 * bound)
            if near.size:
                scores[near] = self._sum(X[near], np.dtype(np.float64), block_bytes)[0] + shift
                rescored = int(near.size)
        return scores, rescored

    def _sum(self, X, dtype: np.dtype, block_bytes: int, weighted: bool = False):
        """(Σ over support-vector blocks of k(X, block) @ coef[block] in float64 (n, K); with
        ``weighted`` also max over outputs of Σ |coef| k(X, block) (n,), else None)."""
        (n, d), total, outputs = X.shape, self.vectors.shape[0], self.coef.shape[1]
        out = np.zeros((n, 2 * outputs if weighted else outputs))
        if n == 0 or total == 0:
            return out[:, :outputs], (out[:, 0] if weighted else None)
        X = as_float_rows(X, dtype)
        sparse_vectors = isinstance(self.vectors, CsrRows) or scipy.sparse.issparse(self.vectors)
        # a block of dense vectors is as wide as the features; of sparse ones, as its values
        width = 1 if sparse_vectors else d
        step = max(1, block_bytes // (dtype.itemsize * max(width, n)))
        buffer = np.empty(n * min(step, total), dtype)
        add_residual = self.residual is not None and dtype == np.float64
        for start in range(0, total, step):
            stop = min(start + step, total)
            if sparse_vectors:
                Z = as_float_rows(self.vectors[start:stop], dtype)
            elif add_residual:  # float32 + float32 residual in float64: the exact vectors
                Z = np.array(self.vectors[start:stop], dtype)
                Z += self.residual[start:stop]
            else:  # float32 from float32 files: the mapped rows, no copy
                Z = np.asarray(self.vectors[start:stop], dtype)
            K = self.kernel.block(X, Z, out=buffer[:n * (stop - start)].reshape(n, -1))
            coef = np.asarray(self.coef[start:stop], np.float64)
            if weighted:
                coef = np.concatenate([coef, np.abs(coef)], axis=1)
            if dtype == np.float64:
                out += K @ coef
            else:  # the products in float64: a float32 sum of thousands of cancelling terms
                # loses digits the error bound does not account for
                add_float64_products(K, np.ascontiguousarray(coef.T), out)
        if weighted:
            return out[:, :outputs], out[:, outputs:].max(axis=1)
        return out, None


@numba.njit(nogil=True, fastmath=True, cache=True)
def add_float64_products(K, coef_t, out):
    """``out += K @ coef_t.T`` with every product and sum in float64, for a float32 kernel
    block ``K`` (n, m) and ``coef_t`` (outputs, m): one pass over the block, where
    ``K.astype(float64) @ coef`` wrote a float64 copy of it first (five times the time on
    10,000 × 1,677 blocks here, and a fresh copy's page faults every block)."""
    for a in range(K.shape[0]):
        for c in range(coef_t.shape[0]):
            total = 0.0
            for b in range(K.shape[1]):
                total += np.float64(K[a, b]) * coef_t[c, b]
            out[a, c] += total


def radial_slack(X, sensitivity: float, sq_norm_max: float) -> np.ndarray:
    """Relative error of each row's float32 entries of a radial kernel (see
    :data:`ROUNDING_MARGIN`): its ``sensitivity`` (the largest |∂ ln k / ∂d²|, γ for rbf) times
    the error of the row's squared distances, ``margin · √(t + 2) · u · (‖x‖² + max ‖z‖²)``
    for t terms (the row's features, or a sparse row's values) and unit roundoff u, plus a few
    u for the exp and the rounding to float32."""
    terms = np.diff(X.indptr) if scipy.sparse.issparse(X) else np.full(X.shape[0], X.shape[1])
    distance_error = ROUNDING_MARGIN * np.sqrt(terms + 2.0) * UNIT_ROUNDOFF_32 * \
        (squared_norms(X, np.float64) + sq_norm_max)
    return 8.0 * UNIT_ROUNDOFF_32 + sensitivity * distance_error


def raw_scores(X: np.ndarray, support_vectors: np.ndarray, coef: np.ndarray, kernel: Kernel,
               intercept=None, precision: str = "float32",
               block_bytes: int | None = None) -> tuple[np.ndarray, int]:
    """(scores (n, K) float64 with the intercept — K = 1 for two classes —, how many rows
    were re-scored in float64): :meth:`SupportSet.raw_scores` for in-memory arrays."""
    return SupportSet.from_arrays(support_vectors, coef, kernel, intercept).raw_scores(
        X, precision, block_bytes)
