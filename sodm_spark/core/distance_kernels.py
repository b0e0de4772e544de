"""The kernels that are functions of the difference x − z: rbf and Matérn (of the squared
distance ‖x − z‖², from the GEMM and the rows' squared norms) and laplacian (of the L1
distance, which has no product form).

Each is a :class:`~sodm_spark.core.kernels.Kernel` (defining the class registers it by its
``name``); all three are stationary: k(x, x) = 1 and 0 < k(x, z) ≤ 1, so their diagonal
bounds their values without being computed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import numba
import numpy as np
import scipy.sparse

from .kernels import Kernel, OnnxGraph
from .sparse_rows import Rows, is_sparse

#: Why the laplacian kernel refuses CSR rows, and what to use instead.
LAPLACIAN_SPARSE = ("the laplacian kernel needs L1 distances |x − z|, which have no product "
                    "form for sparse (CSR) rows; use kernel='rbf' (the Gaussian kernel on the "
                    "same rows) or 'linear', or densify the rows (X.toarray(); LIBSVM input "
                    "read with sparse=False)")
#: The laplacian's block on a device holds rows × centres × features differences at once.
LAPLACIAN_BLOCK_BYTES = 1 << 27
#: Support vectors × features per step of the laplacian kernel's ONNX Scan (its scratch per
#: row: 8 KiB, 82 MB for a batch of 10,000 rows). 10,000 rows against 1,000 vectors of 7
#: features took 0.23 s with 256, 0.16 s with 1,024 and 0.11 s with 4,096; 3,000 of 50
#: features 0.68, 0.86 and 1.07 s (the package's cdist blocks: 0.45 and 1.31 s).
LAPLACIAN_BLOCK_CELLS = 1024


class _RadialKernel(Kernel):
    """What the kernels of the squared distance d² = ‖x‖² + ‖z‖² − 2 x·z share: d² from the
    GEMM and the rows' squared norms, clamped at 0 (rounding can make it a little negative
    where x = z)."""

    radial: ClassVar[bool] = True
    stationary: ClassVar[bool] = True
    positive_semidefinite: ClassVar[bool] = True

    @staticmethod
    def _array_squared_distances(xp: ModuleType, products: Any, x_sq: Any, z_sq: Any) -> Any:
        return xp.maximum(x_sq[:, None] + z_sq[None, :] - 2.0 * products,
                          xp.zeros((), dtype=products.dtype))

    @staticmethod
    def _onnx_scaled_distances(graph: OnnxGraph, inputs: str, vectors: np.ndarray,
                               scale: float, name: str) -> str:
        """``scale · ‖x − z‖²`` of every row and vector, (batch, N), from one product:
        ``[x, 1, ‖x‖²] · scale [−2z, ‖z‖², 1]`` (subtracting the norms afterwards took two more
        passes over the block, as long as the product itself in onnxruntime)."""
        row_norms = graph.op("ReduceSum", graph.op("Mul", inputs, inputs), graph.axes(1),
                             keepdims=1)
        ones = graph.op("ConstantOfShape", graph.op("Shape", row_norms),
                        value=graph.onnx.numpy_helper.from_array(np.ones(1)))
        extended = graph.op("Concat", inputs, ones, row_norms, axis=1)
        factors = scale * np.vstack([-2.0 * vectors.T,
                                     np.einsum("ij,ij->i", vectors, vectors)[None, :],
                                     np.ones((1, vectors.shape[0]))])
        return graph.op("MatMul", extended, graph.constant(name, factors))


@dataclass(frozen=True)
class RBFKernel(_RadialKernel):
    """The Gaussian kernel k(x, z) = exp(−γ‖x − z‖²) (scikit-learn's ``rbf_kernel``)."""

    name: str = "rbf"
    aliases: ClassVar[tuple[str, ...]] = ("gaussian",)
    gamma_scales_as_power: ClassVar[bool] = True

    @property
    def distance_sensitivity(self) -> float:
        return self.gamma  # ln k = −γ d²

    def _finish(self, products: np.ndarray, x_sq: np.ndarray | None,
                z_sq: np.ndarray | None) -> np.ndarray:
        rbf_exponent(products, np.asarray(x_sq, products.dtype),
                     np.asarray(z_sq, products.dtype), self.gamma)
        np.exp(products, out=products)
        return products

    def _array_finish(self, xp: ModuleType, products: Any, x_sq: Any, z_sq: Any) -> Any:
        return xp.exp(-self.gamma * self._array_squared_distances(xp, products, x_sq, z_sq))

    def onnx_sums(self, graph: OnnxGraph, inputs: str, vectors: np.ndarray,
                  coef: np.ndarray) -> str:
        """``exp(−γ‖x − z‖²)`` with the exponent from one product. Rounding may leave it a few
        units above 0 where x = z; exp then errs by as few units, so no clamp (another pass)
        is needed."""
        exponents = self._onnx_scaled_distances(graph, inputs, vectors, -self.gamma,
                                                "rbf_factors")
        return self._onnx_weighted(graph, graph.op("Exp", exponents), coef)


@dataclass(frozen=True)
class LaplacianKernel(Kernel):
    """k(x, z) = exp(−γ‖x − z‖₁) (scikit-learn's ``laplacian_kernel``): L1 distances, which
    have no product form, so dense rows only (:data:`LAPLACIAN_SPARSE`)."""

    name: str = "laplacian"
    stationary: ClassVar[bool] = True
    gamma_scales_as_power: ClassVar[bool] = True
    positive_semidefinite: ClassVar[bool] = True
    sparse_refusal: ClassVar[str | None] = LAPLACIAN_SPARSE

    def block(self, X: Rows, Z: Rows, out: np.ndarray | None = None,
              z_sq_norms: np.ndarray | None = None, first_row: int = 0) -> np.ndarray:
        """scipy's compiled ``cdist`` of the block's rows (``z_sq_norms`` is not read)."""
        if scipy.sparse.issparse(X) or is_sparse(Z):
            raise ValueError(LAPLACIAN_SPARSE)
        # imported here: scipy.spatial costs the scoring tasks half a second to import
        from scipy.spatial.distance import cdist

        if out is None:
            out = np.empty((X.shape[0], Z.shape[0] - first_row))
        out[...] = cdist(X, Z[first_row:], metric="cityblock")
        out *= -self.gamma
        np.exp(out, out=out)
        return out + self.offset if self.offset else out

    def array_block(self, xp: ModuleType, X: Any, Z: Any, x_sq: Any = None,
                    z_sq: Any = None) -> Any:
        """The L1 distances summed over the features of a row block at a time (at most
        :data:`LAPLACIAN_BLOCK_BYTES` of differences)."""
        step = max(1, LAPLACIAN_BLOCK_BYTES // max(1, Z.shape[0] * Z.shape[1] * 8))
        parts = [xp.sum(xp.abs(xp.expand_dims(X[start:min(start + step, X.shape[0]), :], axis=1)
                               - xp.expand_dims(Z, axis=0)), axis=2)
                 for start in range(0, X.shape[0], step)]
        out = xp.exp(-self.gamma * (xp.concat(parts, axis=0) if len(parts) > 1 else parts[0]))
        return out + self.offset if self.offset else out

    def onnx_sums(self, graph: OnnxGraph, inputs: str, vectors: np.ndarray,
                  coef: np.ndarray) -> str:
        """Σ_i α_i exp(−γ‖x − z_i‖₁) (batch, outputs) in a ``Scan`` over blocks of
        :data:`LAPLACIAN_BLOCK_CELLS` support-vector numbers; padded vectors get α = 0."""
        onnx = graph.onnx
        helper, double = onnx.helper, onnx.TensorProto.DOUBLE
        count, width = vectors.shape
        outputs = coef.shape[1]
        block = max(1, LAPLACIAN_BLOCK_CELLS // max(1, width))
        blocks = -(-count // block)
        padded_vectors = np.zeros((blocks * block, width))
        padded_vectors[:count] = vectors
        padded_coef = np.zeros((blocks * block, outputs))
        padded_coef[:count] = coef
        rows3 = graph.op("Unsqueeze", inputs, graph.axes(1))  # (batch, 1, width)
        batch = graph.op("Slice", graph.op("Shape", inputs), graph.axes(0), graph.axes(1))
        start = graph.op("ConstantOfShape", graph.op(
            "Concat", batch, graph.constant("outputs_count", np.asarray([outputs], np.int64)),
            axis=0), value=onnx.numpy_helper.from_array(np.zeros(1)))
        body = graph.nested()
        block_vectors, block_coef = "block_vectors", "block_coef"
        distances = body.op("ReduceSum", body.op("Abs", body.op("Sub", rows3, block_vectors)),
                            body.axes(2), keepdims=0)  # (batch, block)
        entries = body.op("Exp", body.op("Mul", distances,
                                         body.constant("minus_gamma", np.asarray(-self.gamma))))
        body.op("Add", "sums_in", body.op("MatMul", entries, block_coef), output="sums_out")
        graph.absorb(body)
        body_graph = helper.make_graph(
            body.nodes, "laplacian_block",
            [helper.make_tensor_value_info("sums_in", double, None),
             helper.make_tensor_value_info(block_vectors, double, [block, width]),
             helper.make_tensor_value_info(block_coef, double, [block, outputs])],
            [helper.make_tensor_value_info("sums_out", double, None)], initializer=body.arrays)
        return graph.op("Scan", start,
                        graph.constant("laplacian_vectors",
                                       padded_vectors.reshape(blocks, block, width)),
                        graph.constant("laplacian_coef",
                                       padded_coef.reshape(blocks, block, outputs)),
                        body=body_graph, num_scan_inputs=2)


@dataclass(frozen=True)
class MaternKernel(_RadialKernel):
    """The Matérn kernel of smoothness ν = 3/2, k(x, z) = (1 + √3 r/ℓ) exp(−√3 r/ℓ) with
    r = ‖x − z‖ (Rasmussen & Williams, "Gaussian Processes for Machine Learning", 2006,
    Eqn 4.17; scikit-learn's ``Matern(length_scale=ℓ, nu=1.5)``): once differentiable, between
    the laplacian kernel (ν = 1/2) and the rbf kernel (ν → ∞).

    Its width is ``gamma`` = 1/ℓ², which scales the squared distance as the rbf kernel's γ
    does: k = (1 + t) exp(−t) with t = √(3γ‖x − z‖²). So ``gamma='scale'`` (1/(d·Var X))
    and ``'auto'`` (1/d) give it the length scale at which γ times a typical squared distance
    between two rows (2·d·Var X) is 2, as for rbf.
    """

    name: str = "matern"

    @property
    def distance_sensitivity(self) -> float:
        # d ln k / d(d²) = −3γ / (2 (1 + t)): at most 3γ/2, at d = 0
        return 1.5 * self.gamma

    def _finish(self, products: np.ndarray, x_sq: np.ndarray | None,
                z_sq: np.ndarray | None) -> np.ndarray:
        matern32_from_products(products, np.asarray(x_sq, products.dtype),
                               np.asarray(z_sq, products.dtype), 3.0 * self.gamma)
        return products

    def _array_finish(self, xp: ModuleType, products: Any, x_sq: Any, z_sq: Any) -> Any:
        t = xp.sqrt((3.0 * self.gamma) * self._array_squared_distances(xp, products, x_sq, z_sq))
        return (1.0 + t) * xp.exp(-t)

    def onnx_sums(self, graph: OnnxGraph, inputs: str, vectors: np.ndarray,
                  coef: np.ndarray) -> str:
        """``(1 + t) exp(−t)`` with ``t² = 3γ‖x − z‖²`` from one product, clamped at 0 before
        the square root (rounding may leave it a few units below 0 where x = z)."""
        scaled = self._onnx_scaled_distances(graph, inputs, vectors, 3.0 * self.gamma,
                                             "matern_factors")
        t = graph.op("Sqrt", graph.op("Relu", scaled))
        one = graph.constant("matern_one", np.asarray(1.0))
        entries = graph.op("Mul", graph.op("Add", t, one), graph.op("Exp", graph.op("Neg", t)))
        return self._onnx_weighted(graph, entries, coef)


@numba.njit(cache=True, fastmath=True)
def rbf_exponent(products: np.ndarray, x_sq: np.ndarray, z_sq: np.ndarray,
                 gamma: float) -> None:
    """``products ← -γ · max(0, ‖x‖² + ‖z‖² − 2·products)`` in place: the RBF exponent of a block
    from its GEMM, in one pass instead of five numpy passes (``np.exp`` follows)."""
    minus_gamma = -gamma
    for a in range(products.shape[0]):
        for b in range(products.shape[1]):
            squared = x_sq[a] + z_sq[b] - 2.0 * products[a, b]
            products[a, b] = minus_gamma * (squared if squared > 0.0 else 0.0)


@numba.njit(cache=True, fastmath=True)
def matern32_from_products(products: np.ndarray, x_sq: np.ndarray, z_sq: np.ndarray,
                           scale: float) -> None:
    """``products ← (1 + t) exp(−t)``, ``t = √(scale · max(0, ‖x‖² + ‖z‖² − 2·products))``, in
    place: the Matérn 3/2 block from its GEMM in one pass (``scale`` = 3γ)."""
    for a in range(products.shape[0]):
        for b in range(products.shape[1]):
            squared = x_sq[a] + z_sq[b] - 2.0 * products[a, b]
            t = math.sqrt(scale * squared) if squared > 0.0 else 0.0
            products[a, b] = (1.0 + t) * math.exp(-t)
