"""Arrays on the CPU or on a GPU behind one namespace (the Python array API standard).

The device path's numerics (:mod:`~sodm_spark.core.kernel_blocks`,
:mod:`~sodm_spark.solvers.odm_newton`, :mod:`~sodm_spark.models.nystroem_odm`) are written once
against a namespace ``xp`` with the standard's functions, as scikit-learn's array API support
is: numpy on the CPU, PyTorch or CuPy on a GPU, through ``array_api_compat``, which gives the
three the standard's names. A test runs the same code on numpy and on ``array_api_strict``
(the standard and nothing more), so what passes on a CPU machine runs on a GPU unchanged.

:func:`resolve_device` turns the user's ``device`` ("auto", "cpu" or "gpu"; docs/design.md §2.10)
into an :class:`ArrayDevice`, or None for the CPU default, the numba solvers.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from .errors import ResourceError, SettingsError

DEVICE_CHOICES = ("auto", "cpu", "gpu")
#: The GPU libraries tried for device="gpu", in this order (SODM_GPU_LIBRARY picks one).
GPU_LIBRARIES = ("torch", "cupy")
#: An array of the device path's library (numpy, PyTorch, CuPy or array_api_strict), and one of
#: its dtypes: the standard defines no static types that these libraries share, so both are Any.
#: Their namespaces (``xp``) are modules.
Array = Any
DType = Any

NO_GPU = ("device='gpu' (--device gpu) needs a CUDA GPU that PyTorch or CuPy can see, and "
          "{why}; install sodm-spark[gpu] on a machine with a GPU (on a cluster: "
          "spark.executor.resource.gpu.amount and spark.task.resource.gpu.amount), or use "
          "--device cpu")


def check_device(device: object) -> str:
    """``device`` as one of :data:`DEVICE_CHOICES` (a settings error otherwise)."""
    if not isinstance(device, str) or device.lower() not in DEVICE_CHOICES:
        raise SettingsError(f"device must be one of {', '.join(DEVICE_CHOICES)}, got "
                            f"{device!r}.")
    return device.lower()


@dataclass(frozen=True)
class ArrayDevice:
    """Where the device path's arrays live: ``library`` on the CPU or on GPU ``index``."""

    kind: str  # "cpu" or "gpu"
    library: str  # "numpy", "array_api_strict" (tests), "torch" or "cupy"
    index: int | None = None  # the CUDA device number of a GPU

    @property
    def xp(self) -> ModuleType:
        """The namespace: the standard's functions over this library's arrays."""
        if self.library == "array_api_strict":
            import array_api_strict

            return array_api_strict
        import array_api_compat

        if self.library == "numpy":
            return array_api_compat.array_namespace(np.empty(0))
        if self.library == "torch":
            import array_api_compat.torch as xp_torch

            return xp_torch
        import array_api_compat.cupy as xp_cupy

        return xp_cupy

    @property
    def handle(self) -> Any:
        """The device argument of ``xp.asarray`` (None on the CPU): a ``torch.device`` or a
        ``cupy.cuda.Device``, of libraries without type information here."""
        if self.kind == "cpu":
            return None
        if self.library == "torch":
            import torch

            return torch.device("cuda", self.index or 0)
        import cupy

        return cupy.cuda.Device(self.index or 0)

    def asarray(self, values: Array, dtype: DType = None) -> Array:
        """``values`` (numpy or this library's) as an array on this device."""
        xp = self.xp
        if self.library == "cupy":
            with self.handle:
                return xp.asarray(values, dtype=dtype)
        if self.kind == "cpu" and self.library == "numpy":
            return np.asarray(values, dtype=dtype)
        return xp.asarray(values, dtype=dtype, device=self.handle)

    def to_numpy(self, values: Array) -> np.ndarray:
        """An array of this device as a numpy array on the host."""
        if isinstance(values, np.ndarray):
            return values
        host: np.ndarray  # what the untyped torch and CuPy arrays give back
        if self.library == "torch":
            host = values.detach().cpu().numpy()
        elif self.library == "cupy":
            host = values.get()
        else:
            host = np.asarray(values)
        return host

    def synchronize(self) -> None:
        """Wait for the GPU's queued work (for honest timings); nothing on the CPU."""
        if self.library == "torch":
            import torch

            torch.cuda.synchronize(self.handle)
        elif self.library == "cupy":
            import cupy

            cupy.cuda.Device(self.index or 0).synchronize()

    def free_bytes(self) -> int | None:
        """Free memory of the GPU in bytes (None on the CPU: the host's plan applies)."""
        if self.library == "torch":
            import torch

            return int(torch.cuda.mem_get_info(self.handle)[0])
        if self.library == "cupy":
            import cupy

            with self.handle:
                return int(cupy.cuda.runtime.memGetInfo()[0])
        return None

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"cpu ({self.library})"
        free = self.free_bytes()
        assert free is not None  # a GPU's library (torch, cupy) reports its free memory
        return f"cuda:{self.index or 0} ({self.library}, {free / 2**30:.1f} GiB free)"


CPU = ArrayDevice("cpu", "numpy")


def _gpu_library(preferred: str | None = None) -> tuple[str | None, str]:
    """The first GPU library that imports and sees a CUDA device, or (None, why not)."""
    names = (preferred,) if preferred else GPU_LIBRARIES
    reasons: list[str] = []
    for name in names:
        try:
            if name == "torch":
                import torch

                if torch.cuda.is_available() and torch.cuda.device_count() > 0:
                    return name, ""
                reasons.append("PyTorch sees no CUDA device")
            elif name == "cupy":
                import cupy

                if cupy.cuda.runtime.getDeviceCount() > 0:
                    return name, ""
                reasons.append("CuPy sees no CUDA device")
            else:
                reasons.append(f"{name!r} is not a GPU library ({', '.join(GPU_LIBRARIES)})")
        except ImportError:
            reasons.append(f"{name} is not installed")
        except Exception as error:  # a CUDA runtime without a driver raises its own errors
            reasons.append(f"{name} found no usable CUDA device ({type(error).__name__})")
    return None, "; ".join(reasons)


def gpu_available() -> bool:
    """Whether a GPU library here sees a CUDA device."""
    return _gpu_library(os.environ.get("SODM_GPU_LIBRARY"))[0] is not None


def resolve_device(device: str, gpu_index: int | None = None) -> ArrayDevice | None:
    """The arrays of ``device``: "cpu" the device path on numpy, "gpu" on GPU ``gpu_index``
    (a ResourceError in one line when there is none), "auto" the GPU when one is here, else
    None: the CPU default, the numba solvers."""
    device = check_device(device)
    if device == "cpu":
        return CPU
    library, why = _gpu_library(os.environ.get("SODM_GPU_LIBRARY"))
    if library is None:
        if device == "auto":
            return None
        raise ResourceError(NO_GPU.format(why=why or "none was found"))
    return ArrayDevice("gpu", library, int(gpu_index or 0))


def namespace_of(*arrays: Array) -> ModuleType:
    """The namespace of ``arrays`` (numpy's standard names for numpy arrays)."""
    import array_api_compat

    return array_api_compat.array_namespace(*arrays)


def device_of(array: Array) -> object:
    """The device ``array`` lives on, to create the arrays that meet it there."""
    import array_api_compat

    return array_api_compat.device(array)
