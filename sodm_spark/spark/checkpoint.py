"""Checkpoints of an SODM fit (Algorithm 1): after every solved level, its layout and γ.

A checkpoint directory holds ``state.json`` (the fit's parameters, a fingerprint of the data,
the finished levels' stats) and one ``level-<l>.npz`` per finished level with, for every
partition key, its row ids in partition order and their γ. Features are not copied: on resume
the rows are looked up by id in the (same) input data and dealt straight to their partitions,
so the next merge sees exactly the blocks an uninterrupted run would have seen, and the seeded
solves (seed, level, partition) repeat bit for bit. Every file is written to a temporary name
and renamed, and ``state.json`` names a level only after its arrays are in place, so a run
killed at any moment leaves the last complete level readable.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

STATE_FILE = "state.json"
FORMAT = "sodm_spark.checkpoint"
FORMAT_VERSION = 1
# Parameters that do not change what a finished level holds.
_NOT_COMPARED = ("stop_level", "min_improvement", "time_budget")


def _write_atomically(path: Path, write) -> None:
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(handle)
    try:
        write(staging)
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.remove(staging)


class LevelCheckpoint:
    """Checkpoint directory of one SODM fit; see the module docstring for the layout."""

    def __init__(self, directory, params: dict, n_rows: int, n_features: int, classes):
        self.directory = Path(directory)
        self.identity = {"params": {k: v for k, v in params.items() if k not in _NOT_COMPARED},
                         "n_rows": int(n_rows), "n_features": int(n_features),
                         "classes": [str(c) for c in np.asarray(classes).tolist()]}
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
            raise ValueError(f"checkpoint {self.state_path} is unreadable ({error}); remove the "
                             "directory to start afresh.") from error
        if state.get("format") != FORMAT or state.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{self.state_path} is not a checkpoint this version reads "
                             f"(format {state.get('format')!r} v{state.get('format_version')!r}).")
        mine = json.loads(json.dumps(self.identity, default=str))
        if state["identity"] != mine:
            changed = sorted(key for key in set(mine["params"]) | set(state["identity"]["params"])
                             if mine["params"].get(key) != state["identity"]["params"].get(key))
            other = [key for key in ("n_rows", "n_features", "classes")
                     if mine[key] != state["identity"][key]]
            raise ValueError(
                f"checkpoint {self.directory} belongs to another fit (differs in "
                f"{', '.join(changed + other)}); resume with the same data and flags, or use "
                "another --checkpoint-dir.")
        return state

    def save_level(self, level: int, pieces, stats: dict) -> None:
        """Record a solved level: ``pieces`` = [(key, row ids, γ)] over all its partitions."""
        self.directory.mkdir(parents=True, exist_ok=True)
        pieces = sorted(pieces, key=lambda piece: piece[0])
        keys = np.array([piece[0] for piece in pieces], dtype=np.int64)
        sizes = np.array([piece[1].size for piece in pieces], dtype=np.int64)
        ids = np.concatenate([piece[1] for piece in pieces]).astype(np.int64)
        gamma = np.concatenate([piece[2] for piece in pieces]).astype(np.float64)
        if np.unique(ids).size != ids.size:
            raise ValueError("checkpointing needs unique row ids, but some repeat; the input "
                             "reader numbers rows, so this is a bug — please report it.")

        def write_arrays(staging):
            with open(staging, "wb") as handle:
                np.savez(handle, keys=keys, sizes=sizes, ids=ids, gamma=gamma)

        _write_atomically(self.directory / f"level-{level}.npz", write_arrays)
        self.levels.append(dict(stats, level=level))
        state = {"format": FORMAT, "format_version": FORMAT_VERSION, "identity": self.identity,
                 "levels": self.levels}
        _write_atomically(self.state_path,
                          lambda staging: Path(staging).write_text(json.dumps(state, indent=2,
                                                                              default=str)))

    def load_level(self, level: int | None = None):
        """(level, finished level stats, [(key, ids, γ)]) of a complete level (default: the
        last one)."""
        state = self.read_state()
        self.levels = list(state["levels"])
        if not self.levels:
            raise ValueError(f"checkpoint {self.directory} holds no finished level.")
        if level is None:
            level = int(self.levels[-1]["level"])
        try:
            with np.load(self.directory / f"level-{level}.npz", allow_pickle=False) as arrays:
                keys, sizes = arrays["keys"], arrays["sizes"]
                ids, gamma = arrays["ids"], arrays["gamma"]
        except (OSError, KeyError, ValueError) as error:
            raise ValueError(f"checkpoint {self.directory}: level-{level}.npz is unreadable "
                             f"({error}); remove the directory to start afresh.") from error
        bounds = np.cumsum(sizes)[:-1]
        pieces = list(zip(keys.tolist(), np.split(ids, bounds), np.split(gamma, bounds)))
        return level, self.levels, pieces


def deal_by_layout(item, lookup_ids, lookup_keys, lookup_positions):
    """Sub-blocks of one (X, ±1 y, ids) block keyed by their checkpointed partition."""
    X, y, ids = item
    where = np.searchsorted(lookup_ids, ids)
    where = np.minimum(where, lookup_ids.size - 1)
    present = lookup_ids[where] == ids  # Ca-ODM levels keep only support vectors
    keys, positions = lookup_keys[where], lookup_positions[where]
    for key in np.unique(keys[present]):
        rows = present & (keys == key)
        yield int(key), (positions[rows], X[rows], y[rows], ids[rows])


def assemble_partition(records, gammas):
    """(key, (X, y, ids, γ, stats)) for each key, rows in checkpointed order."""
    groups = {}
    for key, piece in records:
        groups.setdefault(key, []).append(piece)
    for key in sorted(groups):
        pieces = groups[key]
        positions = np.concatenate([p[0] for p in pieces])
        order = np.argsort(positions, kind="stable")
        X = np.concatenate([p[1] for p in pieces])  # kernel SODM rows are dense
        y = np.concatenate([p[2] for p in pieces])[order]
        ids = np.concatenate([p[3] for p in pieces])[order]
        yield key, (X[order], y, ids, gammas[key], {"key": key})
