"""The kernels that are functions of the inner product x·z alone: linear and polynomial.

Each is a :class:`~sodm_spark.core.kernels.Kernel` (defining the class registers it by its
``name``): its block is the GEMM ``X Zᵀ`` finished elementwise, so sparse rows take it as
dense ones do, and its diagonal is read from the rows' squared norms.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from .kernels import Kernel, OnnxGraph
from .sparse_rows import Rows, squared_norms


@dataclass(frozen=True)
class LinearKernel(Kernel):
    """k(x, z) = x·z. Its γ is 1 (no parameter); a model of it is one weight vector
    ``w = Σ_i α_i z_i``, which is its ONNX graph too."""

    name: str = "linear"
    uses_gamma: ClassVar[bool] = False
    positive_semidefinite: ClassVar[bool] = True

    def _diagonal(self, X: Rows) -> np.ndarray:
        return squared_norms(X)

    def _finish(self, products: np.ndarray, x_sq: np.ndarray | None,
                z_sq: np.ndarray | None) -> np.ndarray:
        return products

    def _array_finish(self, xp: ModuleType, products: Any, x_sq: Any, z_sq: Any) -> Any:
        return products

    def onnx_sums(self, graph: OnnxGraph, inputs: str, vectors: np.ndarray,
                  coef: np.ndarray) -> str:
        return graph.op("MatMul", inputs, graph.constant("weights", vectors.T @ coef))


@dataclass(frozen=True)
class PolynomialKernel(Kernel):
    """k(x, z) = (γ x·z + coef0)^degree (scikit-learn's ``polynomial_kernel``), ``degree`` a
    positive integer. Positive semi-definite when coef0 ≥ 0 (a sum of products of positive
    semi-definite kernels); otherwise its values are not bounded by its diagonal."""

    name: str = "poly"
    aliases: ClassVar[tuple[str, ...]] = ("polynomial",)

    @classmethod
    def check_parameters(cls, degree: int, coef0: float) -> None:
        if int(degree) != degree or degree < 1:
            raise ValueError(f"degree must be a positive integer, got {degree!r}.")

    @property
    def bounded_by_diagonal(self) -> bool:
        return self.coef0 >= 0.0

    def _diagonal(self, X: Rows) -> np.ndarray:
        diagonal: np.ndarray = (self.gamma * squared_norms(X) + self.coef0) ** self.degree
        return diagonal

    def _finish(self, products: np.ndarray, x_sq: np.ndarray | None,
                z_sq: np.ndarray | None) -> np.ndarray:
        products *= self.gamma
        products += self.coef0
        if self.degree != 1:
            np.power(products, self.degree, out=products)
        return products

    def _array_finish(self, xp: ModuleType, products: Any, x_sq: Any, z_sq: Any) -> Any:
        return (self.gamma * products + self.coef0) ** self.degree

    def onnx_sums(self, graph: OnnxGraph, inputs: str, vectors: np.ndarray,
                  coef: np.ndarray) -> str:
        """``(γ xZᵀ + coef0)^degree`` by repeated products (:meth:`OnnxGraph.power`: exact
        integer powers, as numpy's, for any sign of the base)."""
        products = graph.op("MatMul", inputs,
                            graph.constant("gamma_support_vectors_t", self.gamma * vectors.T))
        base = graph.op("Add", products, graph.constant("coef0", np.asarray(self.coef0)))
        return self._onnx_weighted(graph, graph.power(base, self.degree), coef)
