"""The result record of a benchmark run: what was run (the command, the commit and whether the
tree had changes), where (the machine: cores, memory, CPU, the BLAS and its kernel, GPUs), on
what (a data set's identity: its rows and a content hash), the figures the script measured and
the run's timeline. One JSON file a run, so that a figure in the guides can be traced to the run
that produced it: every ``benchmarks/bench_*.py`` writes one with ``--record PATH``
(:func:`add_record_flag`, :func:`start_record`, :class:`RunRecord`; ``bench_at_scale.py`` and
``bench_back_ends.py`` always, with the medians of their runs and the ratios of each pair of
runs: :func:`job_ratios`, :func:`paired_ratios`).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..core.errors import EXIT_CODES, SETTINGS
from ..core.timeline import Timeline
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


def content_hash(y: np.ndarray, X_first, X_last) -> str:
    """sha256 of the labels (float64) and of the first and last rows given (float32,
    C order; a scipy sparse block by its stored values, their columns and its row offsets, so
    that 100,000 columns are never made dense): the same rows give the same hash on any
    machine, a changed label or end row a different one."""
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(y, dtype="<f8").tobytes())
    for rows in (X_first, X_last):
        if hasattr(rows, "tocsr"):
            rows = rows.tocsr()
            for part, dtype in ((rows.data, "<f4"), (rows.indices, "<i8"),
                                (rows.indptr - rows.indptr[0], "<i8")):
                digest.update(np.ascontiguousarray(part, dtype=dtype).tobytes())
        else:
            digest.update(np.ascontiguousarray(rows, dtype="<f4").tobytes())
    return digest.hexdigest()


def array_identity(X, y) -> dict:
    """The identity of rows in memory: rows, features and :func:`content_hash` of every label
    and the first and last :data:`HASHED_END_ROWS` rows."""
    return {"rows": int(X.shape[0]), "features": int(X.shape[1]),
            "sha256": content_hash(y, X[:HASHED_END_ROWS], X[-HASHED_END_ROWS:])}


def file_identity(path) -> dict:
    """The identity of a data file a job reads whole (LIBSVM text, one Parquet file): its
    path, bytes, rows (Parquet's metadata; a text file's lines) and the sha256 of its bytes,
    read in blocks of a MiB."""
    path = Path(path)
    digest, lines = hashlib.sha256(), 0
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            lines += block.count(b"\n")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        lines = pq.ParquetFile(path).metadata.num_rows
    return {"path": str(path), "bytes": path.stat().st_size, "rows": lines,
            "sha256": digest.hexdigest()}


def data_identity(name: str, train, test=None) -> dict:
    """A record's ``dataset``: the data set's name and the identity of its training rows and
    of its test rows (where there are any), each given as ``(X, y)`` in memory
    (:func:`array_identity`), a folder of Parquet files (:func:`parquet_identity`) or a file
    (:func:`file_identity`)."""
    def identity(data) -> dict:
        if isinstance(data, tuple):
            return array_identity(*data)
        return parquet_identity(data) if Path(data).is_dir() else file_identity(data)

    return {"name": name, "train": identity(train),
            **({} if test is None else {"test": identity(test)})}


def parquet_identity(folder) -> dict:
    """The identity of a folder of ``part-*.parquet`` files of a label and the features (one
    array column ``features``, or a column per feature): rows,
    features, files and :func:`content_hash` of every label and the first and last
    :data:`HASHED_END_ROWS` rows; only the labels are read whole."""
    import pyarrow.parquet as pq

    paths = sorted(Path(folder).glob("*.parquet"))
    labels = np.concatenate([pq.read_table(path, columns=["label"]).column("label").to_numpy()
                             for path in paths])

    def rows(path, first: bool) -> np.ndarray:
        table = pq.read_table(path)
        if "features" in table.column_names:  # one array column
            column = table.column("features").combine_chunks()
            block = np.asarray(column.flatten().to_numpy(), np.float32).reshape(len(column), -1)
        else:  # a column per feature, in the file's order
            block = np.column_stack([np.asarray(table.column(name).to_numpy(), np.float32)
                                     for name in table.column_names if name != "label"])
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


def paired_ratios(rounds: list[dict], numerator: str, denominator: str,
                  field: str = "wall_seconds") -> list[dict]:
    """Round by round (``rounds``: one dict of name → figures a round, as :func:`run_medians`
    reads them; the runs of a round ran one after the other), ``numerator``'s ``field`` over
    ``denominator``'s: ``{"round": index, "ratio": value}`` for each round where both have it."""
    ratios = []
    for number, run in enumerate(rounds):
        top, bottom = ((run.get(name) or {}).get(field) for name in (numerator, denominator))
        if isinstance(top, (int, float)) and isinstance(bottom, (int, float)) and bottom:
            ratios.append({"round": number, "ratio": top / bottom})
    return ratios


def default_record_path(root, dataset: str, rows: list[int], now: datetime | None = None,
                        kind: str = "at_scale"):
    """``docs/results/<kind>/<dataset>-<rows>-<UTC date>.json`` under ``root`` (``kind``: the
    script's folder, ``at_scale`` or ``back_ends``; rows joined by ``_`` for several sizes);
    the UTC time is added when that file exists already."""
    now = now or datetime.now(timezone.utc)
    folder = Path(root) / "docs" / "results" / kind
    stem = f"{dataset}-{'_'.join(str(r) for r in rows)}-{now:%Y-%m-%d}"
    path = folder / f"{stem}.json"
    return path if not path.exists() else folder / f"{stem}T{now:%H%M%S}Z.json"


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def record_head(root, command: list[str], settings: dict) -> dict:
    """A record's head: the command line (quoted as a shell would take it), the start in UTC,
    :func:`git_state` of ``root``, :func:`machine_record` and the settings (non-JSON values as
    text; ``dataset`` copied up)."""
    return {"command": shlex.join(str(part) for part in command), "started_utc": _utc_now(),
            "git": git_state(root), "machine": machine_record(),
            "dataset": settings.get("dataset"),
            "settings": {key: value if isinstance(value, (int, float, str, type(None)))
                         else str(value) for key, value in settings.items()}}


def _strict_json(value):
    """``value`` as strict JSON holds it: numpy scalars and arrays as numbers and lists, tuples
    as lists, and a NaN or an infinity (a figure a run could not measure) as null, which JSON
    has where it has no NaN."""
    if isinstance(value, dict):
        return {key: _strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_strict_json(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_record(path, document: dict) -> None:
    """The record as indented strict JSON (:func:`_strict_json`; other objects as their text),
    written beside ``path`` and renamed over it (a run that rewrites it after every method
    never leaves half a file)."""
    text = json.dumps(_strict_json(document), indent=2, default=str, allow_nan=False) + "\n"
    replace_file(path, lambda staging: Path(staging).write_text(text))


class RunRecord:
    """The result record of one run of a benchmark script, at ``path`` (None: no record; the
    laps are still kept, nothing else is measured or written). Its head (:func:`record_head`)
    is written when it is made, so a path that cannot be written fails before the work
    (OSError). :meth:`add_data` names the data read, :meth:`lap` closes a stage of the run's
    timeline (a method, a data set), and :meth:`write` adds the script's figures (top-level
    keys, as the script named them), the timeline and the end in UTC and writes the record
    again whole (:func:`write_record`), as often as the script wants one that survives a later
    failure."""

    def __init__(self, path, root, command: list[str], settings: dict):
        self.path = path
        self.timeline = Timeline()  # from the command's start: the imports are its "other"
        self._lap_started = time.perf_counter()
        self.document: dict = record_head(root, command, settings) if path else {}
        self._data: list[dict] = []
        self.write(finished=False)

    def add_data(self, name: str, train, test=None) -> None:
        """Add :func:`data_identity` of a data set the run read to the record's ``dataset``
        (a list: one entry a data set); nothing is read without a record."""
        if self.path:
            self._data.append(data_identity(name, train, test))
            self.document["dataset"] = self._data

    def lap(self, name: str) -> float:
        """Close the stage ``name``, from the previous lap (or the record's start) to now;
        returns its seconds."""
        now = time.perf_counter()
        stage = self.timeline.add(name, now - self._lap_started, self._lap_started)
        self._lap_started = now
        return stage.seconds

    def write(self, *, finished: bool = True, machine: dict | None = None,
              timeline: Timeline | None = None, **figures) -> None:
        """Write the record (where there is a path) with ``machine``'s entries added to the
        machine's (a device, a master), the figures, the ``timeline`` (default: the laps) and
        ``finished_utc`` (None while ``finished`` is False: a record rewritten part way)."""
        if not self.path:
            return
        self.document["machine"].update(machine or {})
        self.document.update(figures)
        self.document["timeline"] = (timeline or self.timeline).to_dict()
        self.document["finished_utc"] = _utc_now() if finished else None
        write_record(self.path, self.document)


def add_record_flag(parser: argparse.ArgumentParser, *aliases: str) -> None:
    """``--record PATH`` (and the names a script took for it before, ``aliases``:
    ``--json-out``, ``--json``): where the run's result record goes, ``args.record``."""
    parser.add_argument("--record", *aliases, dest="record", type=Path, metavar="PATH",
                        help="write the run's result record here (JSON: the command, the "
                        "commit, the machine, the data's identity, the figures, the timeline)")


def start_record(parser: argparse.ArgumentParser, args: argparse.Namespace, script: str,
                 argv: list[str] | None = None) -> RunRecord:
    """The :class:`RunRecord` of ``script`` (its ``__file__``: the checkout is the folder above
    its own) at ``args.record``, begun now with ``args`` as its settings and the command line
    (``argv``, or this process's). A path that cannot be written is refused before any work,
    in one line with the exit code of a setting (:data:`~sodm_spark.core.errors.EXIT_CODES`)."""
    command = [sys.executable, *(sys.argv if argv is None else [script, *argv])]
    try:
        return RunRecord(args.record, Path(script).resolve().parents[1], command, vars(args))
    except OSError as error:
        parser.exit(EXIT_CODES[SETTINGS],
                    f"error: --record {args.record} cannot be written "
                    f"({error.strerror or error}); give the path of a file in a writable "
                    "folder.\n")
