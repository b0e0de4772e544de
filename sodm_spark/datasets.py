"""Real data sets that registry packages ship, read with numpy only.

Fashion-MNIST (70,000 × 784 grey images, 10 classes) ships in Debian's
``dataset-fashion-mnist`` package as gzip IDX files under /usr/share/datasets/fashion-mnist.
"""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
          "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def read_idx(path: str | Path) -> np.ndarray:
    """Read one gzip IDX file of unsigned bytes (the MNIST file format)."""
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    zero, type_code, n_dims = struct.unpack(">HBB", data[:4])
    if zero != 0 or type_code != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes (header {data[:4]!r}).")
    dims = struct.unpack(">" + "I" * n_dims, data[4:4 + 4 * n_dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * n_dims).reshape(dims)


def load_fashion_mnist(split: str = "train", root: str | Path = FASHION_MNIST_DIR,
                       binary: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST rows as float64 pixels in [0, 1] (784 columns) and their labels.

    With ``binary=True`` the labels are ±1: +1 for the even classes (T-shirt, pullover, coat,
    shirt, bag) and -1 for the odd ones (trouser, dress, sandal, sneaker, ankle boot) — a
    balanced task in which tops are confused with dresses and bags with shoes.
    """
    if split not in _FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    images, labels = (Path(root) / name for name in _FILES[split])
    if not images.exists():
        raise FileNotFoundError(
            f"{images} not found: install Debian's dataset-fashion-mnist package "
            "(apt-get install dataset-fashion-mnist) or pass root= the folder with the IDX files.")
    X = read_idx(images).reshape(-1, 784).astype(np.float64) / 255.0
    y = read_idx(labels).astype(np.int64)
    return X, (np.where(y % 2 == 0, 1, -1) if binary else y)


def make_nonlinear(n_samples: int = 60000, n_features: int = 10, seed: int = 0,
                   label_noise: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """A seeded two-class problem that a linear model cannot solve but an RBF kernel can.

    Rows are standard normal; the label is the side of a perturbed sphere in the first five
    coordinates, ``‖x[:5]‖² + x5·x6 > 4.35`` (about half the rows on each side), with a
    fraction ``label_noise`` of labels flipped. The built-in data of ``jobs/train_sodm.py``.
    """
    if n_features < 7:
        raise ValueError(f"make_nonlinear needs n_features >= 7, got {n_features}.")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features))
    score = np.einsum("ij,ij->i", X[:, :5], X[:, :5]) + X[:, 5] * X[:, 6] - 4.35
    y = np.where(score > 0, 1, -1)
    flip = rng.random(n_samples) < label_noise
    y[flip] = -y[flip]
    return X, y


def make_linear(n_samples: int = 100000, n_features: int = 50, seed: int = 0,
                label_noise: float = 0.05, density: float = 1.0, centred: bool = True):
    """A seeded two-class problem with a linear boundary: y = sign((x - c)ᵀw* + noise).

    ``density`` < 1 returns X as a scipy CSR matrix with about that fraction of nonzeros per
    row (wide sparse data, as text or click logs); the built-in data of the linear kernel path.
    ``centred=False`` draws dense features uniformly from [0, 1] and splits the classes at the
    cube's centre c = (½, …, ½), far from the origin: data as users bring them (pixels, rates),
    where a hyperplane through the origin cannot fit and an intercept is needed.
    """
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal(n_features)
    if not centred:
        if density < 1.0:
            raise ValueError("centred=False draws dense uniform features; pass density=1.")
        X = rng.random((n_samples, n_features))
        score = (X - 0.5) @ w_true
        y = np.where(score + 0.1 * np.std(score) * rng.standard_normal(n_samples) > 0, 1, -1)
        flip = rng.random(n_samples) < label_noise
        y[flip] = -y[flip]
        return X, y
    if density >= 1.0:
        X = rng.standard_normal((n_samples, n_features))
    else:
        import scipy.sparse

        X = scipy.sparse.random(n_samples, n_features, density=density, format="csr",
                                random_state=rng, data_rvs=rng.standard_normal)
    score = np.asarray(X @ w_true).ravel()
    y = np.where(score + 0.1 * np.std(score) * rng.standard_normal(n_samples) > 0, 1, -1)
    flip = rng.random(n_samples) < label_noise
    y[flip] = -y[flip]
    return X, y
