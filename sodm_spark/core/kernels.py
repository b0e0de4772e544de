"""Kernels, one class each, and their blocks computed as blocked BLAS.

:class:`Kernel` is the contract every kernel keeps; each kernel is one subclass, registered by
its ``name`` when it is defined (:mod:`.product_kernels`: linear, poly, functions of ``X Zᵀ``;
:mod:`.distance_kernels`: rbf, laplacian, matern, functions of ``x − z``). ``Kernel(name, …)``
and :meth:`Kernel.create` build the class registered as ``name``, so that everything that takes
a kernel by name (the estimators, the jobs, a saved model's ``to_dict``) reads one registry:
:func:`kernel_names`. A kernel holds its block on numpy (:meth:`Kernel.block`, in place) and on
any array namespace (:meth:`Kernel.array_block`, the device path), its diagonal, whether its
diagonal bounds its values (the int16 storage of :mod:`sodm_spark.solvers.kernel_rows`), its
ONNX graph (:meth:`Kernel.onnx_sums`) and the properties the rest of the package asks instead
of its name. Adding a kernel is one new subclass and its tests (docs/design.md §1.5, "Adding a
kernel").

Every kernel block is built from one matrix product (GEMM) of a row block of ``X`` with ``Z``
(for the radial kernels through ``‖x‖² + ‖z‖² - 2 x zᵀ``); the laplacian kernel needs L1
distances, which have no GEMM form, and uses scipy's compiled ``cdist`` per block instead.
Row blocks are sized so that one block's scratch memory stays within ``block_mb``.

Rows may be dense or CSR (text and web data: 10^5+ features, a few hundred values a row):
the product ``X Zᵀ`` of sparse rows is :func:`sodm_spark.core.sparse_rows.inner_products` and the
squared norms come from the stored values, so a block of sparse rows is the same dense block
as the one of their dense copies, for every kernel of the product form. The laplacian
kernel refuses sparse rows (its L1 distances have no product form).

The kernel parameters follow scikit-learn's ``SVC``: ``gamma="scale"`` is ``1 / (d · Var X)``,
``gamma="auto"`` is ``1 / d``, polynomial is ``(gamma · x zᵀ + coef0) ** degree``.

``offset`` c turns any kernel k into k + c: a constant feature √c in the feature space, so a
kernel expansion Σ_i a_i (k(x_i, x) + c) = Σ_i a_i k(x_i, x) + b carries a bias
b = c·Σ_i a_i, penalized as part of ‖w‖² (LIBLINEAR's bias feature B = √c). That is how a
kernel ODM, whose dual (SODM Eqn 1) has no bias, gets one. Distances in the feature space,
hence landmarks and strata (Eqns 7-8), do not change.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Iterator, Protocol

import numpy as np
import numpy.typing as npt
import scipy.sparse

from .sparse_rows import (DENSE_PRODUCT_DENSITY, Rows, SparseOperand, as_float_rows,
                          dense_if_full, feature_variance, inner_products, squared_norms)

#: The kernel of ``Kernel()`` (the dataclass's default name).
DEFAULT_NAME = "rbf"
# Every kernel class by its name, in the order they are defined, and the aliases of the names;
# filled by Kernel.__init_subclass__
_CLASSES: dict[str, type[Kernel]] = {}
_ALIASES: dict[str, str] = {}


def kernel_names() -> tuple[str, ...]:
    """The name of every kernel, in the order their classes are defined (aliases left out)."""
    return tuple(_CLASSES)


def kernel_class(name: object) -> type[Kernel]:
    """The class of the kernel called ``name`` (or one of its aliases); a ValueError naming the
    known kernels for any other name."""
    canonical = _ALIASES.get(name, name) if isinstance(name, str) else name
    if not isinstance(canonical, str) or canonical not in _CLASSES:
        raise ValueError(
            f"Unknown kernel {name!r}; known kernels are {', '.join(kernel_names())}.")
    return _CLASSES[canonical]


def resolve_gamma(gamma: str | float, X: Rows) -> float:
    """Turn ``gamma`` ('scale', 'auto' or a positive number) into a float for data ``X``."""
    needs_variance = isinstance(gamma, str) and gamma == "scale"
    return gamma_value(gamma, X.shape[1], feature_variance(X) if needs_variance else None)


def gamma_value(gamma: str | float, n_features: int, variance: float | None = None) -> float:
    """``gamma`` as a float: 'scale' is 1/(d · Var X) (Var over all entries), 'auto' is 1/d."""
    if isinstance(gamma, str):
        if gamma == "scale":
            if variance is None or not np.isfinite(variance) or variance <= 0.0:
                raise ValueError(
                    "gamma='scale' is 1/(n_features * X.var()), but X has zero variance "
                    "(every feature value is the same); pass a numeric gamma instead."
                )
            return 1.0 / (n_features * variance)
        if gamma == "auto":
            return 1.0 / n_features
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive number, got {gamma!r}.")
    try:
        value = float(gamma)
    except (TypeError, ValueError):
        value = float("nan")
    if not np.isfinite(value) or value <= 0.0:
        raise ValueError(f"gamma must be a positive finite number, got {gamma!r}.")
    return value


class OnnxGraph(Protocol):
    """The ONNX graph a kernel adds its nodes to (:class:`sodm_spark.models.onnx_export._Graph`):
    ``op`` adds a node and returns its output's name, ``constant`` an array, ``axes`` an int64
    axes array; ``power`` is ``base ** degree`` by products; ``nested`` starts the body of a
    ``Scan`` (its names unique with the graph's; :meth:`absorb` takes its count back)."""

    onnx: Any

    def op(self, op_type: str, *inputs: str, output: str | None = None,
           **attributes: Any) -> str: ...

    def constant(self, name: str, array: Any) -> str: ...

    def axes(self, *values: int) -> str: ...

    def power(self, base: str, degree: int) -> str: ...

    def nested(self) -> Any: ...

    def absorb(self, body: Any) -> None: ...


@dataclass(frozen=True)
class Kernel:
    """A resolved kernel: its name and numeric parameters (gamma already a float), and what
    it computes.

    ``Kernel(name, gamma, degree, coef0, offset)`` is an instance of the subclass registered
    as ``name`` (an alias gives the same kernel), so kernels compare equal, hash and pickle by
    class and parameters; a subclass declares ``name: str = "…"`` (and its ``aliases``),
    which registers it, and overrides the hooks below that it needs. Every kernel keeps all
    five fields (``degree`` and ``coef0`` are the polynomial's), so that ``to_dict`` writes the
    same five keys for every kernel, as saved models hold them.
    """

    name: str = DEFAULT_NAME
    gamma: float = 1.0
    degree: int = 3
    coef0: float = 0.0
    offset: float = 0.0  # c in k + c (module docstring)

    #: Other names the kernel is known by (``Kernel.create("gaussian")`` is the rbf kernel).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Whether ``gamma`` is a parameter of the kernel ('scale' and 'auto' resolved against the
    #: rows); the linear kernel's is 1.
    uses_gamma: ClassVar[bool] = True
    #: A function of the squared distance ‖x − z‖² = ‖x‖² + ‖z‖² − 2 x·z: its block needs the
    #: rows' squared norms, and it is unchanged by a translation or a rotation of the rows (so
    #: the fits may centre the rows and project them onto principal directions: docs/design.md
    #: §2.8).
    radial: ClassVar[bool] = False
    #: A positive function of x − z with k(x, x) = 1: every value in (0, 1] (before the offset).
    stationary: ClassVar[bool] = False
    #: The kernel at s·γ is the elementwise s-th power of the kernel at γ (γ scales an exponent):
    #: the hyperparameter search computes one matrix for all its γ multiples.
    gamma_scales_as_power: ClassVar[bool] = False
    #: Positive semi-definite for every parameter value: |k(x, z)| ≤ √(k(x, x) k(z, z)).
    positive_semidefinite: ClassVar[bool] = False
    #: Why the kernel refuses sparse (CSR) rows and what to do instead; None when it takes them.
    sparse_refusal: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if not isinstance(name, str):  # a shared base of several kernels, not a kernel
            return
        for known in (name, *cls.aliases):
            if known in _CLASSES or known in _ALIASES:
                raise TypeError(f"{cls.__name__}: a kernel called {known!r} exists already "
                                f"({kernel_class(known).__name__}).")
        if not cls.stationary and cls._diagonal is Kernel._diagonal:
            raise TypeError(f"{cls.__name__}: a kernel that is not stationary defines its "
                            "diagonal k(x, x) (_diagonal).")
        _CLASSES[name] = cls
        _ALIASES.update({alias: name for alias in cls.aliases})

    def __new__(cls, *args: Any, **kwargs: Any) -> Kernel:
        if cls is Kernel:  # Kernel("rbf", ...) is the class registered as "rbf"
            cls = kernel_class(args[0] if args else kwargs.get("name", DEFAULT_NAME))
        return super().__new__(cls)

    def __post_init__(self) -> None:
        kind = kernel_class(self.name)
        if kind is not type(self):
            raise ValueError(f"{type(self).__name__} is the {type(self).name!r} kernel, "
                             f"not {self.name!r}.")
        object.__setattr__(self, "name", kind.name)  # an alias: the kernel's own name

    @classmethod
    def create(cls, name: str, gamma: str | float = 1.0, degree: int = 3, coef0: float = 0.0,
               X: Rows | None = None, offset: float = 0.0) -> Kernel:
        """Validate ``name``; resolve ``gamma`` against ``X`` when it is 'scale' or 'auto'."""
        kind = kernel_class(name)
        if not kind.uses_gamma:
            resolved = 1.0
        elif X is None:
            if isinstance(gamma, str):
                raise ValueError(f"gamma={gamma!r} needs the training data to be resolved.")
            resolved = gamma_value(gamma, 1)
        else:
            resolved = resolve_gamma(gamma, X)
        kind.check_parameters(degree, coef0)
        try:
            offset = float(offset)
        except (TypeError, ValueError):
            offset = float("nan")
        if not np.isfinite(offset) or offset < 0.0:
            raise ValueError(f"the kernel offset c (k + c) must be a finite number >= 0, "
                             f"got {offset!r}.")
        return kind(kind.name, float(resolved), int(degree), float(coef0), offset)

    @classmethod
    def check_parameters(cls, degree: int, coef0: float) -> None:
        """Refuse parameters the kernel cannot take (a ValueError); the other kernels ignore
        ``degree`` and ``coef0``."""

    def to_dict(self) -> dict[str, Any]:
        """The kernel on disk: its five fields by name (saved models, the ONNX metadata)."""
        return {"name": self.name, "gamma": self.gamma, "degree": self.degree, "coef0": self.coef0,
                "offset": self.offset}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Kernel:
        """The kernel :meth:`to_dict` wrote, by its name's class."""
        # models saved before the offset existed have none
        return Kernel(str(data["name"]), float(data["gamma"]), int(data["degree"]),
                      float(data["coef0"]), float(data.get("offset", 0.0)))

    @property
    def bounded_by_diagonal(self) -> bool:
        """Whether the largest diagonal value bounds every |k(x, z)| (a positive semi-definite
        kernel): the scale of an int16 kernel matrix (:mod:`sodm_spark.solvers.kernel_rows`)."""
        return self.positive_semidefinite

    @property
    def distance_sensitivity(self) -> float | None:
        """For a radial kernel, the largest |∂ ln k / ∂d²| over squared distances d²: how a
        relative error of a block's squared distances carries into its values (the float32
        scoring's bound, :mod:`sodm_spark.models.scoring`); None for the others."""
        return None

    def diagonal(self, X: Rows) -> np.ndarray:
        """``k(x_i, x_i)`` for every row (dense or CSR), in O(n·d) or O(stored values)."""
        return self._diagonal(X) + self.offset

    def _diagonal(self, X: Rows) -> np.ndarray:
        """``k(x_i, x_i)`` without the offset: 1 for a stationary kernel (the others define
        their own, as __init_subclass__ requires)."""
        return np.ones(X.shape[0])

    def block(self, X: Rows, Z: Rows, out: np.ndarray | None = None,
              z_sq_norms: np.ndarray | None = None, first_row: int = 0) -> np.ndarray:
        """One kernel block ``k(X, Z[first_row:])`` of shape (len(X), len(Z) - first_row),
        written into ``out`` if given (``z_sq_norms``: the squared norms of those rows of Z).

        The block is produced by one GEMM in the dtype of ``out`` (float64 when ``out`` is
        None), or for sparse rows by :func:`~sodm_spark.core.sparse_rows.inner_products`.
        """
        dtype = np.float64 if out is None else out.dtype
        if out is None:
            out = np.empty((X.shape[0], Z.shape[0] - first_row), dtype=dtype)
        X = as_float_rows(X, dtype)  # converted once, for the product and the norms
        inner_products(X, Z, out, first_row)  # one GEMM, or the sparse product (sparse_rows)
        x_sq = z_sq = None
        if self.radial:
            x_sq = squared_norms(X, dtype)
            z_sq = (squared_norms(Z, dtype)[first_row:] if z_sq_norms is None
                    else z_sq_norms.astype(dtype))
        return self.finish(out, x_sq, z_sq)

    def finish(self, products: np.ndarray, x_sq: np.ndarray | None = None,
               z_sq: np.ndarray | None = None) -> np.ndarray:
        """The kernel block from the products ``X Zᵀ``, in place (a radial kernel: with the
        rows' squared norms ``x_sq`` and ``z_sq``), the offset added."""
        out = self._finish(products, x_sq, z_sq)
        if self.offset:
            out += self.offset
        return out

    def _finish(self, products: np.ndarray, x_sq: np.ndarray | None,
                z_sq: np.ndarray | None) -> np.ndarray:
        """:meth:`finish` without the offset: the kernel's own epilogue of the GEMM."""
        raise ValueError(f"the {self.name} kernel is not a function of X Zᵀ.")

    def array_block(self, xp: ModuleType, X: Any, Z: Any, x_sq: Any = None,
                    z_sq: Any = None) -> Any:
        """``k(X, Z)`` in the array namespace ``xp`` (numpy, PyTorch, CuPy; X's dtype and
        device), the offset added: one GEMM finished by :meth:`_array_finish`. A radial kernel
        takes the rows' squared norms (:func:`sodm_spark.core.kernel_blocks.kernel_block`
        computes them)."""
        out = self._array_finish(xp, X @ Z.T, x_sq, z_sq)
        return out + self.offset if self.offset else out

    def _array_finish(self, xp: ModuleType, products: Any, x_sq: Any, z_sq: Any) -> Any:
        """:meth:`_finish` in the array namespace ``xp`` (a new array, not in place)."""
        raise ValueError(f"the {self.name} kernel is not a function of X Zᵀ.")

    def onnx_sums(self, graph: OnnxGraph, inputs: str, vectors: np.ndarray,
                  coef: np.ndarray) -> str:
        """Add to ``graph`` the nodes of Σ_i α_i k(x, z_i) for every output (batch, outputs),
        without the offset, of the rows ``inputs`` against the float64 support ``vectors``
        (N, d) and coefficients ``coef`` (N, outputs), N ≥ 1 (:mod:`sodm_spark.models.onnx_export`);
        the output's name."""
        raise ValueError(f"the {self.name!r} kernel has no ONNX export.")

    def _onnx_weighted(self, graph: OnnxGraph, entries: str, coef: np.ndarray) -> str:
        """The kernel ``entries`` (batch, N) times the coefficients: Σ_i α_i k(x, z_i)."""
        return graph.op("MatMul", entries, graph.constant("coefficients", coef))


def operand_rows(Z: Rows, dtype: npt.DTypeLike, sparse_products: bool = True) -> Rows:
    """``Z`` as the right-hand rows of many kernel blocks: dense rows C-contiguous in
    ``dtype``; CSR rows laid out once (:class:`~sodm_spark.core.sparse_rows.SparseOperand`) when
    ``sparse_products`` (the left rows are sparse too), else canonical CSR."""
    if isinstance(Z, SparseOperand):
        return Z
    if scipy.sparse.issparse(Z):
        return SparseOperand(Z, dtype) if sparse_products else as_float_rows(Z, dtype)
    return np.ascontiguousarray(Z, dtype=dtype)


def rows_per_block(n_columns: int, itemsize: int, block_mb: float) -> int:
    """How many kernel rows of ``n_columns`` entries fit in ``block_mb`` megabytes (at least 1)."""
    return max(1, int(block_mb * 2**20 // max(1, n_columns * itemsize)))


def iter_kernel_blocks(kernel: Kernel, X: Rows, Z: Rows,
                       dtype: npt.DTypeLike = np.float64,
                       block_mb: float = 256.0) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield ``(row_slice, k(X[row_slice], Z))`` with each block at most ``block_mb`` MB."""
    dtype = np.dtype(dtype)
    step = rows_per_block(Z.shape[0], dtype.itemsize, block_mb)
    Zc = operand_rows(Z, dtype, sparse_products=scipy.sparse.issparse(X))
    z_sq = squared_norms(Zc, dtype) if kernel.radial else None
    for start in range(0, X.shape[0], step):
        rows = slice(start, min(start + step, X.shape[0]))
        yield rows, kernel.block(X[rows], Zc, out=np.empty((rows.stop - start, Z.shape[0]), dtype),
                                 z_sq_norms=z_sq)


def kernel_matrix(kernel: Kernel, X: Rows, Z: Rows | None = None,
                  dtype: npt.DTypeLike = np.float64, block_mb: float = 256.0) -> np.ndarray:
    """The full ``k(X, Z)`` matrix, filled block by block (the caller decides it fits)."""
    Z = X if Z is None else Z
    out = np.empty((X.shape[0], Z.shape[0]), dtype=dtype)
    for rows, block in iter_kernel_blocks(kernel, X, Z, dtype=dtype, block_mb=block_mb):
        out[rows] = block
    return out


def decision_values(kernel: Kernel, X: Rows, support_vectors: Rows,
                    coefficients: np.ndarray, block_mb: float = 256.0,
                    dtype: npt.DTypeLike = np.float64) -> np.ndarray:
    """``k(X, SV) @ coefficients`` without holding more than one block of ``k(X, SV)``.

    ``coefficients`` is (n_sv,) or (n_sv, n_outputs); the result is (n,) or (n, n_outputs),
    float64 whatever ``dtype`` the kernel blocks are computed in. CSR rows at least
    :data:`~.sparse_rows.DENSE_PRODUCT_DENSITY` full are multiplied as dense rows.
    """
    X, support_vectors = (dense_if_full(rows, dtype, DENSE_PRODUCT_DENSITY)
                          for rows in (X, support_vectors))
    coefficients = np.asarray(coefficients, dtype=np.float64)
    out_shape = (X.shape[0],) + coefficients.shape[1:]
    result = np.zeros(out_shape)
    if support_vectors.shape[0] == 0:
        return result
    coefficients = coefficients.astype(dtype)
    for rows, block in iter_kernel_blocks(kernel, X, support_vectors, dtype, block_mb):
        result[rows] = block @ coefficients
    return result



# The kernels themselves, imported last: their classes subclass Kernel above, and defining
# them registers them (in this order: kernel_names()), so that Kernel("rbf") works wherever
# this module is imported
from . import product_kernels, distance_kernels  # noqa: E402, F401, I001
