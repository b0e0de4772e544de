"""Checkpoints of an SODM fit (Algorithm 1): after every solved level, its layout and γ.

A checkpoint directory holds ``state.json`` (the fit's parameters, the data's shape and
fingerprint, the finished levels' stats) and one ``level-<l>.npz`` per finished level with, for every
partition key, its row ids in partition order and their γ. Features are not copied: on resume
the rows are looked up by id in the (same) input data and dealt straight to their partitions,
so the next merge sees exactly the blocks an uninterrupted run would have seen, and the seeded
solves (seed, level, partition) repeat bit for bit. Every file is written to a temporary name
and renamed, and ``state.json`` names a level only after its arrays are in place, so a run
killed at any moment leaves the last complete level readable.

The fingerprint (:func:`block_fingerprint`) hashes every row's id, label and feature bits and
adds the hashes up modulo 2^64 per range of 2^16 row ids: the same rows give the same
fingerprint however the input is sliced, and a resume on other rows is refused naming the id
ranges that differ.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse

from ...core.errors import InputError
from ...core.sparse_rows import stack_rows
from ...data.storage import replace_file
from ..partitioning import as_chunks

STATE_FILE = "state.json"
FORMAT = "sodm_spark.checkpoint"
FORMAT_VERSION = 1
# Parameters that do not change what a finished level holds (the calibration is fitted after
# the levels, so a checkpoint written before it existed resumes too; the device solves the same
# problem, so a fit begun on the CPU resumes on a GPU, and a checkpoint from before the setting)
_NOT_COMPARED = ("stop_level", "min_improvement", "time_budget", "calibration", "device")


_ID_RANGE_BITS = 16
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, element-wise on uint64 (wrapping arithmetic)."""
    z = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def row_hashes(X, y, ids, chunk_rows: int = 4096) -> np.ndarray:
    """A 64-bit hash (uint64) per row of its id, label and every feature's float64 bits.

    A feature's term is the mix of its bits times a fixed weight of its column; a zero's mix
    is 0, so CSR rows are hashed from their stored values alone, to the same hash as their
    dense copies (and at no cost in the width)."""
    n, d = X.shape
    if scipy.sparse.issparse(X):
        X = X.tocsr()
        bits = np.ascontiguousarray(X.data, dtype=np.float64).view(np.uint64)
        rows = np.repeat(np.arange(n), np.diff(X.indptr))
        with np.errstate(over="ignore"):
            terms = _mix(bits) * _mix(X.indices.astype(np.uint64) + np.uint64(1))
        hashes = np.zeros(n, dtype=np.uint64)
        np.add.at(hashes, rows, terms)  # wraps modulo 2^64, as the dense sum does
    else:
        weights = _mix(np.arange(1, d + 1, dtype=np.uint64))  # a fixed weight per column
        hashes = np.empty(n, dtype=np.uint64)
        for start in range(0, n, chunk_rows):
            bits = np.ascontiguousarray(X[start:start + chunk_rows], dtype=np.float64).view(
                np.uint64)
            with np.errstate(over="ignore"):
                hashes[start:start + chunk_rows] = (_mix(bits) * weights).sum(axis=1,
                                                                              dtype=np.uint64)
    label_bits = np.ascontiguousarray(y, dtype=np.float64).view(np.uint64)
    ids = np.asarray(ids, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        return _mix(hashes ^ _mix(ids + np.uint64(0x9E3779B97F4A7C15)) ^ _mix(label_bits))


def block_fingerprint(block) -> dict:
    """{id range: sum of the row hashes mod 2^64} of one (X, y, ids) block; merge blocks with
    :func:`merge_fingerprints` (order and slicing do not matter)."""
    X, y, ids = block[:3]
    if len(ids) == 0:
        return {}
    hashes = row_hashes(X, y, ids)
    if len(block) > 3 and block[3] is not None:  # a weight column changes the fit too
        weight_bits = np.ascontiguousarray(block[3], dtype=np.float64).view(np.uint64)
        with np.errstate(over="ignore"):
            hashes = hashes ^ _mix(weight_bits + np.uint64(0x632BE59BD9B4E019))
    ranges = np.asarray(ids, dtype=np.int64) >> _ID_RANGE_BITS
    out = {}
    for value in np.unique(ranges):
        with np.errstate(over="ignore"):
            out[int(value)] = int(hashes[ranges == value].sum(dtype=np.uint64))
    return out


def merge_fingerprints(a: dict, b: dict) -> dict:
    merged = dict(a)
    for key, value in b.items():
        merged[key] = (merged.get(key, 0) + value) & int(_MASK)
    return merged


def describe_difference(saved: dict, current: dict) -> str:
    """Which id ranges of the data differ between two fingerprints (JSON keys are strings)."""
    saved = {int(k): int(v) for k, v in saved.items()}
    current = {int(k): int(v) for k, v in current.items()}
    differing = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    width = 1 << _ID_RANGE_BITS
    shown = ", ".join(f"[{k * width:,}, {(k + 1) * width:,})" for k in differing[:5])
    more = f" and {len(differing) - 5} more" if len(differing) > 5 else ""
    return (f"the rows with ids in {shown}{more} differ from the checkpointed data (features, "
            f"labels or row ids)")


class LevelCheckpoint:
    """Checkpoint directory of one SODM fit; see the module docstring for the layout."""

    def __init__(self, directory, params: dict, n_rows: int, n_features: int, classes,
                 fingerprint: dict | None = None):
        self.directory = Path(directory)
        self.identity = {"params": {k: v for k, v in params.items() if k not in _NOT_COMPARED},
                         "n_rows": int(n_rows), "n_features": int(n_features),
                         "classes": [str(c) for c in np.asarray(classes).tolist()]}
        self.fingerprint = {str(k): int(v) for k, v in (fingerprint or {}).items()}
        self.levels: list[dict] = []

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def exists(self) -> bool:
        return self.state_path.exists()

    def read_state(self) -> dict:
        try:
            state = json.loads(self.state_path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise InputError(f"checkpoint {self.state_path} is unreadable ({error}); remove the "
                             "directory to start afresh.") from error
        if state.get("format") != FORMAT or state.get("format_version") != FORMAT_VERSION:
            raise InputError(f"{self.state_path} is not a checkpoint this version reads "
                             f"(format {state.get('format')!r} v{state.get('format_version')!r}).")
        mine = json.loads(json.dumps(self.identity, default=str))
        # a setting an older checkpoint does not record compares as None, its unset value
        changed = sorted(key for key in set(mine["params"]) | set(state["identity"]["params"])
                         if mine["params"].get(key) != state["identity"]["params"].get(key))
        other = [key for key in ("n_rows", "n_features", "classes")
                 if mine[key] != state["identity"][key]]
        if changed or other:
            raise InputError(
                f"checkpoint {self.directory} belongs to another fit (differs in "
                f"{', '.join(changed + other)}); resume with the same data and flags, or use "
                "another checkpoint_dir (--checkpoint-dir).")
        saved = state.get("fingerprint")
        if saved is None:
            raise InputError(f"checkpoint {self.directory} records no fingerprint of its data "
                             "(written by an older version), so a resume cannot check that the "
                             "rows are the same; start afresh in another checkpoint_dir "
                             "(--checkpoint-dir).")
        if saved != self.fingerprint:
            raise InputError(f"checkpoint {self.directory} belongs to other data: "
                             f"{describe_difference(saved, self.fingerprint)}. Resume with the "
                             "data the checkpoint was written from, or use another "
                             "checkpoint_dir (--checkpoint-dir).")
        return state

    def save_level(self, level: int, chunks, stats: dict) -> None:
        """Record a solved level: ``chunks`` = [(key, order, row ids, γ)] over all its
        partitions' chunks (:func:`.tasks.checkpoint_layout`)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        chunks = sorted(chunks, key=lambda chunk: (chunk[0], chunk[1]))
        grouped: list[tuple[int, list[np.ndarray], list[np.ndarray]]] = []  # chunks by key
        for key, _, ids, gamma in chunks:
            if grouped and grouped[-1][0] == key:
                grouped[-1][1].append(ids)
                grouped[-1][2].append(gamma)
            else:
                grouped.append((key, [ids], [gamma]))
        pieces = [(key, np.concatenate(ids), np.concatenate(gamma)) for key, ids, gamma in grouped]
        keys = np.array([piece[0] for piece in pieces], dtype=np.int64)
        sizes = np.array([piece[1].size for piece in pieces], dtype=np.int64)
        ids = np.concatenate([piece[1] for piece in pieces]).astype(np.int64)
        gamma = np.concatenate([piece[2] for piece in pieces]).astype(np.float64)
        if np.unique(ids).size != ids.size:
            raise InputError("checkpointing needs unique row ids, but some repeat; the input "
                             "reader numbers rows, so this is a bug — please report it.")

        def write_arrays(staging):
            with open(staging, "wb") as handle:
                np.savez(handle, keys=keys, sizes=sizes, ids=ids, gamma=gamma)

        replace_file(self.directory / f"level-{level}.npz", write_arrays)
        self.levels.append(dict(stats, level=level))
        state = {"format": FORMAT, "format_version": FORMAT_VERSION, "identity": self.identity,
                 "fingerprint": self.fingerprint, "levels": self.levels}
        replace_file(self.state_path,
                     lambda staging: staging.write_text(json.dumps(state, indent=2, default=str)))

    def load_level(self, level: int | None = None):
        """(level, finished level stats, [(key, ids, γ)]) of a complete level (default: the
        last one)."""
        state = self.read_state()
        self.levels = list(state["levels"])
        if not self.levels:
            raise InputError(f"checkpoint {self.directory} holds no finished level.")
        if level is None:
            level = int(self.levels[-1]["level"])
        try:
            with np.load(self.directory / f"level-{level}.npz", allow_pickle=False) as arrays:
                keys, sizes = arrays["keys"], arrays["sizes"]
                ids, gamma = arrays["ids"], arrays["gamma"]
        except (OSError, KeyError, ValueError) as error:
            raise InputError(f"checkpoint {self.directory}: level-{level}.npz is unreadable "
                             f"({error}); remove the directory to start afresh.") from error
        bounds = np.cumsum(sizes)[:-1]
        pieces = list(zip(keys.tolist(), np.split(ids, bounds), np.split(gamma, bounds)))
        return level, self.levels, pieces


def deal_by_layout(item, lookup_ids, lookup_keys, lookup_positions):
    """Sub-blocks of one (X, ±1 y, ids) block keyed by their checkpointed partition."""
    X, y, ids = item[:3]
    weights = item[3] if len(item) > 3 else None  # a weight column's
    where = np.searchsorted(lookup_ids, ids)
    where = np.minimum(where, lookup_ids.size - 1)
    present = lookup_ids[where] == ids  # Ca-ODM levels keep only support vectors
    keys, positions = lookup_keys[where], lookup_positions[where]
    for key in np.unique(keys[present]):
        rows = present & (keys == key)
        yield int(key), (positions[rows], X[rows], y[rows], ids[rows],
                         None if weights is None else weights[rows])


def assemble_partition(records, gammas):
    """The (key, Chunk) records of each key's rows in checkpointed order, with its γ."""
    groups: dict = {}
    for key, piece in records:
        groups.setdefault(key, []).append(piece)
    for key in sorted(groups):
        pieces = groups[key]
        positions = np.concatenate([p[0] for p in pieces])
        order = np.argsort(positions, kind="stable")
        X = stack_rows([p[1] for p in pieces])
        y = np.concatenate([p[2] for p in pieces])[order]
        ids = np.concatenate([p[3] for p in pieces])[order]
        weights = None if pieces[0][4] is None else \
            np.concatenate([p[4] for p in pieces])[order]
        yield from as_chunks(key, X[order], y, ids, gammas[key], weights=weights)
