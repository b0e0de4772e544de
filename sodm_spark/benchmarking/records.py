"""The result record of a benchmark run: what was run (the command, the commit and whether the
tree had changes), where (the machine: cores, memory, CPU, the BLAS and its kernel, GPUs), on
what (a data set's identity: its rows and a content hash), and the figures of every run of
every method with their medians and the job-to-peer ratios of each pair of runs. One JSON file
a run, so that a figure in the guides can be traced to the run that produced it
(``benchmarks/bench_at_scale.py --record``).
"""
from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import statistics
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..data.storage import replace_file
from .report import machine

#: Rows at each end of the training rows whose bytes join the labels' in the content hash
HASHED_END_ROWS = 1000
#: The figures of a method's run whose medians the record keeps
MEDIAN_FIELDS = ("fit_seconds", "test_accuracy", "wall_seconds", "train_seconds",
                 "rows_per_second", "seconds")


def _run(command: list[str], cwd) -> str | None:
    """The stripped output of ``command``, or None when it cannot run or fails."""
    try:
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def git_state(root) -> dict:
    """``{"commit": HEAD's hash, "dirty": whether tracked files differ from it or untracked
    ones exist}`` of the checkout at ``root`` (None for each where git cannot tell). Reads
    only: ``--no-optional-locks`` keeps ``git status`` from refreshing the index."""
    commit = _run(["git", "rev-parse", "HEAD"], root)
    status = _run(["git", "--no-optional-locks", "status", "--porcelain"], root)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def blas_libraries() -> list[dict]:
    """The BLAS / OpenMP libraries loaded now (threadpoolctl): which, its version, the CPU
    kernel it chose (``architecture``: SkylakeX, Haswell, ...) and its thread count."""
    import numpy  # noqa: F401  (loads the BLAS threadpoolctl reports)
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_info

    keys = ("user_api", "internal_api", "version", "architecture", "threading_layer",
            "num_threads", "filepath")
    return [{key: info.get(key) for key in keys} for info in threadpool_info()]


def gpus() -> list[str]:
    """The names ``nvidia-smi`` lists, or none where it is absent."""
    if shutil.which("nvidia-smi") is None:
        return []
    names = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], None)
    return [line.strip() for line in (names or "").splitlines() if line.strip()]


def machine_record() -> dict:
    """:func:`.report.machine` (cores from ``os.cpu_count``, RAM and the CPU model from
    /proc, versions) with the memory in kB as /proc/meminfo gives it, the BLAS libraries and
    their kernels, and the GPUs (an empty list: none)."""
    record = machine()
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        meminfo = []
    record["mem_total_kb"] = next((int(line.split()[1]) for line in meminfo
                                   if line.startswith("MemTotal")), None)
    record["blas"] = blas_libraries()
    record["gpus"] = gpus()
    return record


def content_hash(y: np.ndarray, X_first: np.ndarray, X_last: np.ndarray) -> str:
    """sha256 of the labels (float64) and of the first and last rows given (float32,
    C order): the same rows give the same hash on any machine, a changed label or end row a
    different one."""
    digest = hashlib.sha256()
    for part, dtype in ((y, "<f8"), (X_first, "<f4"), (X_last, "<f4")):
        digest.update(np.ascontiguousarray(part, dtype=dtype).tobytes())
    return digest.hexdigest()


def parquet_identity(folder) -> dict:
    """The identity of a folder of ``part-*.parquet`` files of (label, features): rows,
    features, files and :func:`content_hash` of every label and the first and last
    :data:`HASHED_END_ROWS` rows; only the labels are read whole."""
    import pyarrow.parquet as pq

    paths = sorted(Path(folder).glob("*.parquet"))
    labels = np.concatenate([pq.read_table(path, columns=["label"]).column("label").to_numpy()
                             for path in paths])

    def rows(path, first: bool) -> np.ndarray:
        column = pq.read_table(path, columns=["features"]).column("features").combine_chunks()
        block = np.asarray(column.flatten().to_numpy(), np.float32).reshape(len(column), -1)
        return block[:HASHED_END_ROWS] if first else block[-HASHED_END_ROWS:]

    first, last = rows(paths[0], True), rows(paths[-1], False)
    return {"rows": int(labels.size), "features": int(first.shape[1]), "files": len(paths),
            "positive_share": float(np.mean(labels > 0)),
            "sha256": content_hash(labels, first, last)}


def run_medians(runs: list[dict]) -> dict:
    """For every method of ``runs`` (one dict of method → figures a repeat), the median of
    each of :data:`MEDIAN_FIELDS` over the runs that have it, and the number of runs."""
    medians: dict = {}
    for method in dict.fromkeys(name for run in runs for name in run):
        figures = [run[method] for run in runs if method in run]
        medians[method] = {"runs": len(figures)}
        for field in MEDIAN_FIELDS:
            values = [f[field] for f in figures if isinstance(f.get(field), (int, float))]
            if values:
                medians[method][field] = statistics.median(values)
    return medians


def job_ratios(runs: list[dict]) -> list[dict]:
    """Each job method (``job``, ``job-…``) against each peer with a ``fit_seconds``, run by
    run (the pairs ran one after the other): the job's whole command and its training seconds
    over the peer's fit, and the accuracy difference (job minus peer)."""
    ratios = []
    for number, run in enumerate(runs):
        for job, figures in run.items():
            if not job.startswith("job"):
                continue
            for peer, other in run.items():
                if peer.startswith("job") or not other.get("fit_seconds"):
                    continue
                accuracy = (None if None in (figures.get("test_accuracy"),
                                             other.get("test_accuracy"))
                            else figures["test_accuracy"] - other["test_accuracy"])
                ratios.append({"run": number, "job": job, "peer": peer,
                               "wall_over_fit": figures["wall_seconds"] / other["fit_seconds"],
                               "train_over_fit": figures["train_seconds"] / other["fit_seconds"],
                               "accuracy_difference": accuracy})
    return ratios


def default_record_path(root, dataset: str, rows: list[int], now: datetime | None = None):
    """``docs/results/at_scale/<dataset>-<rows>-<UTC date>.json`` under ``root`` (rows joined
    by ``_`` for several sizes); the UTC time is added when that file exists already."""
    now = now or datetime.now(timezone.utc)
    folder = Path(root) / "docs" / "results" / "at_scale"
    stem = f"{dataset}-{'_'.join(str(r) for r in rows)}-{now:%Y-%m-%d}"
    path = folder / f"{stem}.json"
    return path if not path.exists() else folder / f"{stem}T{now:%H%M%S}Z.json"


def record_head(root, command: list[str], settings: dict) -> dict:
    """A record's head: the command line (quoted as a shell would take it), the start in UTC,
    :func:`git_state` of ``root``, :func:`machine_record`, the settings (non-JSON values as
    text; ``dataset`` copied up) and an empty list of ``sizes`` for the runs."""
    return {"command": shlex.join(command),
            "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "git": git_state(root), "machine": machine_record(),
            "dataset": settings.get("dataset"),
            "settings": {key: value if isinstance(value, (int, float, str, type(None)))
                         else str(value) for key, value in settings.items()}, "sizes": []}


def write_record(path, document: dict) -> None:
    """The record as indented JSON, written beside ``path`` and renamed over it (a run that
    rewrites it after every method never leaves half a file)."""
    text = json.dumps(document, indent=2, default=str) + "\n"
    replace_file(path, lambda staging: Path(staging).write_text(text))
