"""DSVRG (SODM paper, Algorithm 2) on Spark: distributed SVRG for the linear-kernel ODM primal.

Each epoch: the driver sends the snapshot w̃ to every partition, each partition j returns its
loss and loss-gradient sum h_j at w̃ (Alg. 2 lines 6-8) and the driver adds them up in
partition order (line 9); then the partitions take turns (round robin, lines 10-20): partition
j runs SVRG steps on rows drawn without replacement from its own data and hands w to partition
j+1, one single-partition Spark job per hop (``sc.runJob(rdd, f, partitions=[j])``), so only w
(d floats) travels. The numerics are ``sodm_spark.solvers.svrg``; this module moves blocks and
vectors.

**Resident blocks.** Every job reads every row, and handing a cached partition from the JVM
to a Python worker (≈ 400 MB of rows for 10^6 × 50) costs far more than the SVRG steps on it.
So the first task that reads partition j from the persisted RDD also writes its stacked
(X, y) as ``.npy`` files into the executor's Spark local directory (``SPARK_LOCAL_DIRS``,
which Spark hands its Python workers for spilling and deletes when the executor stops), under
an id unique to this fit, and the driver records where. Later jobs run on a tiny "handles"
RDD of one element per partition: its task memory-maps the recorded files (any executor on
that host, zero copies) after checking a fingerprint (rows, columns, nonzeros, label sum,
first and last row sums) against what the driver recorded when the block was first read. A
miss (other host, files gone, fingerprint differs) returns nothing, and the driver reruns that
partition on the persisted RDD, which computes the same function of the same stacked block —
so the result, and w, are bit-identical whichever path ran, and a retried task recomputes
exactly what it would have. One turn of the round robin is one Spark job over a
run of consecutive partitions resident on the same host (all of them in local mode), so the
order of the hops, and w, do not depend on the cluster. The files are deleted when the fit
ends (an executor on a host that the deleting tasks miss deletes them with its local
directory when it stops).

**Input chunks.** The first pass reads the input in one task per core (``coalesce``, no
shuffle) and cuts it into chunks of at most 8 MB, each a partition of Alg. 2 named by its first
row id when the input already looks like the whole (else rows are dealt by stratum into
``n_partitions``): few Spark tasks, and blocks small enough for the SVRG steps' random walk to
stay in cache (:func:`_input_chunks`).
"""
from __future__ import annotations

import itertools
import os
import shutil
import socket
import tempfile
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse

from ..kernels import Kernel
from ..model import KernelExpansion
from ..partition import nearest_landmark, partitions_look_like_whole, select_landmarks
from ..solvers.svrg import (epoch_rng, loss_gradient_sum, row_sq_norms, sample_rows, step_for,
                            svrg_inner)
from ..validation import check_odm_params
from .io import dense_enough
from .sodm_params import SPILL, SODMParams, StatsRecord
from .sodm_prepare import partition_blocks


@dataclass(frozen=True)
class DSVRGParams:
    lam: float = 1000.0
    theta: float = 0.1
    v: float = 0.5
    epochs: int = 30
    tol: float = 1e-6  # stop when the objective changes by at most tol (relative) in an epoch
    step: float | None = None  # default: solvers.svrg.step_for(L_max, rows)
    n_partitions: int | None = None  # default: the cluster's default parallelism
    partitioner: str = "stratified"  # sparse input is dealt at random (no landmarks in 10^5 dims)
    strata: int = 20
    seed: int = 0
    resident: bool = True  # keep partitions' blocks in executor scratch files between jobs
    fit_intercept: bool = True  # unpenalized bias b, f(x) = wᵀx + b (solvers.svrg docstring)

    def validate(self) -> None:
        check_odm_params(self.lam, self.theta, self.v)
        if int(self.epochs) != self.epochs or self.epochs < 1:
            raise ValueError(f"epochs must be a positive integer, got {self.epochs!r}.")
        if self.step is not None and not 0 < self.step < 1:
            raise ValueError(f"step must lie in (0, 1), got {self.step!r}.")
        if self.n_partitions is not None and self.n_partitions < 1:
            raise ValueError(f"n_partitions must be positive, got {self.n_partitions!r}.")


@dataclass
class EpochStats(StatsRecord):
    epoch: int
    seconds: float
    objective: float
    elapsed: float = 0.0  # since the fit started, partitioning included, test scoring excluded
    test_accuracy: float | None = None


@dataclass
class DSVRGFit:
    w: np.ndarray
    model: KernelExpansion
    intercept: float = 0.0
    epochs: list = field(default_factory=list)
    train_seconds: float = 0.0
    partition_seconds: float = 0.0
    n_rows: int = 0
    step: float = 0.0
    layout: str = ""  # how the rows were laid out into partitions
    resident_hits: int = 0  # partition tasks served from resident blocks
    resident_misses: int = 0  # ... that had to read the persisted RDD instead (after the first)


CHUNK_BYTES = 8 << 20


def _chunks(index, blocks, positive):
    """An input partition's rows as (index, (X, ±1 y, ids)) chunks of at most ~8 MB.

    Spark hands a cached partition to Python several times faster as many mid-sized pickles
    than as one large one (DSVRG reads a partition from the RDD once when its block is
    resident, twice per epoch when not).
    """
    for block in blocks:
        n = block.X.shape[0]
        if n == 0:
            continue
        nbytes = block.X.data.nbytes if scipy.sparse.issparse(block.X) else block.X.nbytes
        step = max(1, int(CHUNK_BYTES * n // max(nbytes, 1)))
        y = np.where(block.y == positive, 1.0, -1.0)
        for start in range(0, n, step):
            rows = slice(start, start + step)
            yield index, (block.X[rows], y[rows], block.row_ids[rows])


def _input_chunks(blocks, positive):
    """A coalesced input task's rows as (key, (X, ±1 y, ids)) chunks of at most ~8 MB, each
    its own key: the row id of its first row (content, not placement, names a chunk, so
    seeds and the round robin's order do not depend on how Spark grouped the partitions).

    Reading the input in one task per core instead of one per partition saves Spark's cost
    per Python task (~80 ms here: 33 partitions of 10^6 rows took 1.3 s to hand over, 0.3 s
    coalesced); keying each chunk keeps the blocks the SVRG steps walk at random small enough
    for the cache (45 ns a step on 30,000 × 50 rows, 200 ns on 125,000 × 50).
    """
    return _keyed_by_first_row(_chunks(0, blocks, positive))


def _keyed_by_first_row(records):
    """(partition index, chunk) records re-keyed by the chunk's first row id."""
    for _, chunk in records:
        yield int(chunk[2][0]), chunk


def _tagged(task, records):
    """The first pass's records with the input task (Spark partition) that holds each key."""
    for record in records:
        yield (task, *record)


def _stack(chunks):
    """One (X, y) from a partition's chunks, in order; CSR stays CSR."""
    Xs = [chunk[0] for chunk in chunks]
    if len(Xs) == 1:
        return Xs[0], chunks[0][1]
    X = scipy.sparse.vstack(Xs, format="csr") if scipy.sparse.issparse(Xs[0]) \
        else np.concatenate(Xs)
    return X, np.concatenate([chunk[1] for chunk in chunks])


def _dense_if_full(X):
    """``X`` as a dense array when it is a CSR block full enough (:func:`.io.dense_enough`;
    stacked blocks of a ``sparse=True`` read), else unchanged."""
    if scipy.sparse.issparse(X) and X.shape[0] and dense_enough(X.nnz, *X.shape):
        return X.toarray()
    return X


def _stack_partition(items):
    """A Spark partition's (key, (X, y, ...)) records as one (X, y): keys in order, records of
    one key in the order the partition yields them (the same on every read of a cached RDD)."""
    by_key = {}
    for key, value in items:
        by_key.setdefault(key, []).append(value)
    if not by_key:
        return None
    X, y = _stack([value for key in sorted(by_key) for value in by_key[key]])
    return _dense_if_full(X), y


# --- resident blocks (executor-local files, see the module docstring) -------------------------

def _fingerprint(X, y):
    """Cheap identity of a stacked block: shape, nonzeros, label sum, first/last row sums."""
    n = X.shape[0]
    nnz = X.nnz if scipy.sparse.issparse(X) else X.size
    ends = (float(X[0].sum()), float(X[n - 1].sum())) if n else (0.0, 0.0)
    return (int(n), int(X.shape[1]), int(nnz), float(np.sum(y))) + ends


def _resident_root():
    """This executor's Spark local directory (the first of ``SPARK_LOCAL_DIRS``, the same for
    every Python worker of the executor; Spark deletes it when the executor stops), or the
    system temp directory outside a Spark task."""
    local_dirs = os.environ.get("SPARK_LOCAL_DIRS")
    return local_dirs.split(",")[0] if local_dirs else tempfile.gettempdir()


def _block_dir(root, store, key):
    return os.path.join(root, f"sodm-dsvrg-{store}", str(int(key)))


def _write_resident(store, key, X, y, fingerprint):
    """Make a stacked block resident in this executor's local directory (temp dir + rename, so
    readers never see half a block; a block there that is not this one is replaced). Returns
    the block's directory, or None when it could not be written."""
    final = _block_dir(_resident_root(), store, key)
    if _open_block(final, fingerprint) is not None:
        return final
    try:
        shutil.rmtree(final, ignore_errors=True)  # readers that mapped it keep their mapping
        os.makedirs(os.path.dirname(final), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{key}-", dir=os.path.dirname(final))
        if scipy.sparse.issparse(X):
            for name in ("data", "indices", "indptr"):
                np.save(os.path.join(tmp, name + ".npy"), getattr(X, name))
            np.save(os.path.join(tmp, "shape.npy"), np.array(X.shape, dtype=np.int64))
        else:
            np.save(os.path.join(tmp, "X.npy"), np.ascontiguousarray(X))
        np.save(os.path.join(tmp, "y.npy"), np.asarray(y, dtype=np.float64))
        try:
            os.rename(tmp, final)
        except OSError:  # another task of the same block got there first
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:  # no space or no permission: the block is simply not resident
        return None
    return final


def _open_block(where, expected):
    """The block in directory ``where`` memory-mapped, or None when absent (another host, files
    gone) or not the ``expected`` fingerprint."""
    if where is None or expected is None:
        return None
    try:
        load = lambda name: np.asarray(np.load(os.path.join(where, name + ".npy"),
                                               mmap_mode="r"))
        y = load("y")
        if os.path.exists(os.path.join(where, "X.npy")):
            X = load("X")
        else:
            X = scipy.sparse.csr_matrix((load("data"), load("indices"), load("indptr")),
                                        shape=tuple(int(s) for s in load("shape")))
    except (OSError, ValueError):
        return None
    if _fingerprint(X, y) != tuple(expected):
        return None
    return X, y


def _drop_resident(stores, store_dirs):
    """Delete the stores under this executor's local directory and the recorded ``store_dirs``
    (those of other executors on this host; absent elsewhere)."""
    own = [os.path.join(_resident_root(), f"sodm-dsvrg-{store}") for store in stores]
    for directory in own + list(store_dirs):
        shutil.rmtree(directory, ignore_errors=True)
    return []


def _drop_everywhere(sc, stores, store_dirs, n_tasks):
    """Delete the stores' resident files with ``n_tasks`` tasks (any executor on a host can
    delete that host's files; an executor on a host none of them reaches deletes its files
    with its local directory when it stops)."""
    sc.runJob(sc.parallelize(range(n_tasks), n_tasks),
              lambda _: _drop_resident(stores, store_dirs))


def _on_resident(key, located, fn):
    """Handles task ``key``: (key, fn(key, X, y)) from the resident block, (key, None) on a
    miss. ``located[key]`` = (fingerprint, directory) recorded when the block was written."""
    fingerprint, where = located.get(key, (None, None))
    block = _open_block(where, fingerprint)
    yield key, None if block is None else fn(key, *block)


def _on_resident_group(keys, located, fn):
    """Handles task of a group of keys: ``_on_resident`` for each, in order."""
    for key in keys:
        yield from _on_resident(key, located, fn)


def _chain_resident(keys, located, hop, w):
    """Handles task of a turn over several keys: w ← hop(key, X, y, w) for each key in order
    while its block is resident; returns [(keys done, w)]."""
    done = 0
    for key in keys:
        fingerprint, where = located.get(key, (None, None))
        block = _open_block(where, fingerprint)
        if block is None:
            break
        w = hop(key, *block, w)
        done += 1
    return [(done, w)]


def _on_data(key, items, store, fn):
    """Stack one key's records read from the persisted RDD, make them resident (when
    ``store``), and return (key, fingerprint, (host, block directory or None),
    fn(key, X, y))."""
    block = _stack_partition(items)
    if block is None:
        return
    X, y = block
    fingerprint = _fingerprint(X, y)
    where = None if store is None else _write_resident(store, key, X, y, fingerprint)
    yield key, fingerprint, (socket.gethostname(), where), fn(key, X, y)


def _on_data_keys(items, wanted, store, fn):
    """Data task: :func:`_on_data` for each key of the partition's (key, record) stream that
    is in ``wanted`` (all when None); a key's records come one after another (groupby skips
    the records of a key it is not asked for)."""
    for key, run in itertools.groupby(items, key=lambda item: item[0]):
        if wanted is None or key in wanted:
            yield from _on_data(key, run, store, fn)


class _Blocks:
    """The partitions of one fit as seen by the driver: ``run(fn, keys)`` →
    {key: fn(key, X, y)}, from the resident files where they are, else from the persisted RDD
    ``data`` (key k sits in Spark partition ``partition_of(k)``), which makes them resident.
    ``found``: the
    (key, fingerprint, (host, block directory)) of blocks already read. Handle tasks are not
    placed (PySpark cannot ask for a host without reading the cached partition), so a block is
    found by any executor on the host that wrote it; once misses outnumber hits by more than a
    round (many hosts), the fit stops looking and reads the persisted RDD directly."""

    def __init__(self, sc, data, keys, store=None, found=(), partition_of=None):
        self.sc, self.data, self.keys, self.store = sc, data, list(keys), store
        self.partition_of = partition_of or (lambda key: key)
        self.expected = {key: fingerprint for key, fingerprint, _ in found}
        self.where = {key: where for key, _, where in found}
        n_handles = max(1, sc.defaultParallelism, data.getNumPartitions())
        self.handles = sc.parallelize(range(n_handles), n_handles)
        self.hits = self.misses = 0
        self.active = store is not None  # still looking for (and writing) resident blocks

    def _located(self):
        """{key: (fingerprint, block directory)} for the tasks, or None when not worth a try."""
        self.active = self.active and self.misses <= self.hits + len(self.keys)
        if not self.active:
            return None
        return {key: (fingerprint, self.where.get(key, (None, None))[1])
                for key, fingerprint in self.expected.items()}

    def run(self, fn, keys=None, resident=True):
        keys = self.keys if keys is None else list(keys)
        results, missing = {}, keys
        located = self._located() if resident and self.expected else None
        if located is not None:
            groups = self._groups(keys)
            found = self.sc.runJob(self.handles.mapPartitionsWithIndex(
                lambda index, _: _on_resident_group(groups[index], located, fn)),
                lambda it: it, partitions=list(range(len(groups))))
            results = {key: value for key, value in found if value is not None}
            missing = [key for key in keys if key not in results]
            self.hits += len(results)
            self.misses += len(missing)
        if missing:
            store = self.store if self.active else None
            wanted = set(missing)
            for key, fingerprint, where, value in self.sc.runJob(
                    self.data.mapPartitions(lambda it: _on_data_keys(it, wanted, store, fn)),
                    lambda it: it, partitions=sorted({self.partition_of(k) for k in missing})):
                if self.expected.setdefault(key, fingerprint) != fingerprint:
                    raise RuntimeError(f"DSVRG: partition {key} changed between two reads of "
                                       "the persisted data; is the input deterministic?")
                self.where[key] = where
                results[key] = value
        return results

    def _groups(self, keys):
        """``keys`` in one task per core at most: runs of consecutive keys resident on one
        host, cut into pieces of len(keys)/cores (a task per key cost ~50 ms each: 1.7 s a
        pass over 64 partitions of 10^6 rows, against 0.2 s of SVRG steps per epoch)."""
        size = max(1, -(-len(keys) // max(1, self.sc.defaultParallelism)))
        groups = []
        for _, run in itertools.groupby(keys, key=lambda key: self.where.get(key, (None, None))[0]):
            run = list(run)
            groups += [run[start:start + size] for start in range(0, len(run), size)]
        return groups

    def store_dirs(self):
        """The directories this fit's blocks were written to, per host."""
        return sorted({os.path.dirname(where) for _, where in self.where.values() if where})

    def turns(self):
        """The round robin's turns: runs of consecutive keys resident on one host (one Spark
        job each; all keys in local mode); one key per turn without resident blocks."""
        if not self.active:
            return [[key] for key in self.keys]
        return [list(run) for _, run in itertools.groupby(
            self.keys, key=lambda key: self.where.get(key, (None, None))[0])]

    def chain(self, hop, w, keys):
        """w after ``hop(key, X, y, w)`` for each key of ``keys`` in order, in one task while
        the blocks are resident (one Spark job per turn however many partitions the turn
        spans); a missing block is read from the persisted RDD in a job of its own."""
        keys = list(keys)
        while keys:
            located = self._located()
            if located is not None and all(key in located for key in keys):
                todo = keys
                done, w = self.sc.runJob(self.handles.mapPartitions(
                    lambda _: _chain_resident(todo, located, hop, w)), lambda it: it,
                    partitions=[0])[0]
                self.hits += done
                keys = keys[done:]
                if not keys:
                    break
                self.misses += 1
            key, w_in = keys[0], w
            w = self.run(lambda k, X, y: hop(k, X, y, w_in), keys=[key], resident=False)[key]
            keys = keys[1:]
        return w


# --- partitioning --------------------------------------------------------------------------------

def _survey_block(key, X, y, wanted, seed):
    """Rows, positives, max ‖x‖², sparse?, (dense) a seeded uniform sample of at most
    ``wanted`` rows (smallest random keys) for Eqn 8, and the column sums (for the centring
    of the intercept fit, solvers.svrg), of one stacked partition."""
    sparse = scipy.sparse.issparse(X)
    sample = None
    if not sparse:
        keys = np.random.default_rng([seed, 7, key]).random(X.shape[0])
        sample = np.array(X[np.argsort(keys, kind="stable")[:wanted]])  # in random-key order
    return (X.shape[0], int(np.sum(y > 0)), float(row_sq_norms(X).max()), sparse, sample,
            np.asarray(X.sum(axis=0), dtype=np.float64).reshape(-1))


def _strata_by_class(X, y, landmarks, n_strata):
    """Rows per (stratum of Eqn 7, class) of one partition, flattened to 2·S counts."""
    strata = np.zeros(X.shape[0], dtype=np.int64) if landmarks is None else \
        nearest_landmark(np.asarray(X), landmarks, Kernel.create("linear"))
    return np.bincount(2 * strata + (y > 0), minlength=2 * n_strata)


def _center(config):
    return None if config["center"] is None else config["center"].value


def _loss_and_gradient(X, y, w, config, with_norm=False):
    """The partition's (loss sum, gradient sum) at w; with ``with_norm`` also its largest
    ‖x_i - μ‖² (the step's L_max on centred rows, known once μ is)."""
    center = _center(config)
    sums = loss_gradient_sum(w, X, y, config["lam"], config["theta"], config["v"],
                             config["fit_intercept"], center)
    if not with_norm:
        return sums
    return sums + (float(row_sq_norms(X, center).max()),)


def _hop(X, y, key, w, snapshot, mean_grad, step, config, epoch):
    """One partition's turn: SVRG steps over its own rows without replacement (Alg. 2 l. 14)."""
    rows = sample_rows(X.shape[0], X.shape[0], epoch_rng([config["seed"], key], epoch))
    return svrg_inner(w, snapshot, mean_grad, X, y, rows, step, config["lam"], config["theta"],
                      config["v"], config["fit_intercept"], _center(config))


def _uniform_sample(survey, wanted, seed):
    """``wanted`` rows uniform over all partitions, from each partition's uniform sample."""
    sizes = np.array([entry[1] for entry in survey])
    take = np.random.default_rng([seed, 3]).multivariate_hypergeometric(
        sizes, min(wanted, int(sizes.sum())))
    return np.concatenate([entry[5][:count] for entry, count in zip(survey, take)])


def stratified_layout(sc, inputs: "_Blocks", chunked, per_partition, params: "DSVRGParams",
                      survey):
    """Alg. 2's partitions: the input's own chunks (:func:`_input_chunks`) when they already
    look like the whole (:func:`partitions_look_like_whole` over landmark strata × class), else
    rows dealt by stratum (:func:`partition_blocks`). ``inputs`` runs functions on the input
    chunks, ``chunked`` is the RDD of (key, (X, ±1 y, ids)) chunks behind it and
    ``per_partition`` the same chunks as (input partition, chunk) in the input's own
    partitions, which the dealing reads (so it deals alike whatever the cluster's shape).
    Returns (RDD of (key, block): the input chunks, or the dealt partitions with key k in Spark
    partition k; a description for the log; whether the rows were dealt)."""
    sparse = any(entry[4] for entry in survey)  # any block left CSR: no landmarks
    n_rows = sum(entry[1] for entry in survey)
    n_partitions = params.n_partitions or max(1, sc.defaultParallelism)
    # Sparse rows in 10^5 dimensions get no landmarks: their strata are the two classes.
    landmarks = None
    if not sparse and params.partitioner == "stratified":
        sample = _uniform_sample(survey, 50 * params.strata, params.seed)
        landmarks = sample[select_landmarks(sample, Kernel.create("linear"), params.strata)]
    n_strata = 1 if landmarks is None else landmarks.shape[0]
    same_count = params.n_partitions in (None, len(survey))
    if same_count and len(survey) >= min(n_partitions, n_rows):
        sc.setJobDescription("DSVRG: do the input chunks already look like the whole?")
        counts = inputs.run(lambda _, X, y: _strata_by_class(X, y, landmarks, n_strata))
        if partitions_look_like_whole(np.stack([counts[entry[0]] for entry in survey])):
            return chunked, (f"{len(survey)} input chunks kept: each already holds every "
                             "stratum in its overall share"), False
    if n_partitions > n_rows:
        raise ValueError(f"DSVRG asks for {n_partitions} partitions but the data have only "
                         f"{n_rows} rows; pass at most {n_rows} (--partitions / n_partitions).")
    partitioner = "random" if sparse else params.partitioner
    parts, _, _ = partition_blocks(
        sc, per_partition.values(), SODMParams(kernel="linear", partitioner=partitioner,
                                         strata=params.strata, seed=params.seed, levels=0),
        Kernel.create("linear"), n_rows, n_partitions)
    return parts, f"{partitioner} dealing into {n_partitions} partitions", True


def fit_dsvrg(sc, blocks, params: DSVRGParams, classes, n_features: int, test=None,
              on_epoch=None, w0=None) -> DSVRGFit:
    """DSVRG on ``blocks`` (RDD of Blocks, dense or CSR X, two label values in ``classes``).

    The model is the linear kernel expansion with one "support vector" w, coefficient 1 and
    (with ``params.fit_intercept``) the intercept b, i.e. f(x) = wᵀx + b, so it saves, loads
    and predicts like every other model here. ``w0`` holds d entries, or d+1 (w, b). With
    the intercept the steps run on centred rows x - μ (μ: the column means, summed in the
    survey pass; see solvers.svrg) and (w, b' = b + wᵀμ) is turned back into (w, b) at the end.
    """
    params.validate()
    classes = np.asarray(classes)
    if classes.size != 2:
        raise ValueError(f"DSVRG is a binary classifier; the labels hold {classes.size} classes "
                         f"({', '.join(map(str, classes[:10]))}).")
    started = time.perf_counter()
    positive = classes[1]
    # A miss reads the input again: from the caller's persisted RDD if it is one (no second
    # copy), else from a persisted copy of the chunks made here.
    own_copy = not blocks.is_cached
    per_partition = blocks.mapPartitionsWithIndex(lambda i, it: _chunks(i, it, positive),
                                                  preservesPartitioning=True)
    n_tasks = max(1, min(blocks.getNumPartitions(), sc.defaultParallelism))
    if own_copy:  # coalescing cached data is cheap; coalescing a Python pipeline is not
        per_partition = per_partition.persist(SPILL)
        chunked = per_partition.coalesce(n_tasks).mapPartitions(_keyed_by_first_row)
    else:
        chunked = blocks.coalesce(n_tasks).mapPartitions(lambda it: _input_chunks(it, positive))
    fit_id = uuid.uuid4().hex  # names this fit's resident files; never reused
    stores = [f"{fit_id}-input", f"{fit_id}-dealt"] if params.resident else [None, None]
    parts = inputs = blocks_ = center = None
    try:
        # One read of every input partition: stacked, made resident, surveyed.
        sc.setJobDescription("DSVRG: rows, labels, norms and a landmark sample")
        wanted, seed, store = 50 * params.strata, params.seed, stores[0]
        tagged = sorted(sc.runJob(chunked.mapPartitionsWithIndex(
            lambda task, it: _tagged(task, _on_data_keys(
                it, None, store, lambda key, X, y: _survey_block(key, X, y, wanted, seed)))),
            lambda it: it), key=lambda entry: entry[1])
        input_task = {entry[1]: entry[0] for entry in tagged}
        found = [entry[1:] for entry in tagged]
        if not found:
            raise ValueError("DSVRG got no rows: the training data is empty.")
        survey = [(key, *value) for key, _, _, value in found]
        inputs = _Blocks(sc, chunked, [entry[0] for entry in found], store,
                         [entry[:3] for entry in found], input_task.__getitem__)
        n_rows = sum(entry[1] for entry in survey)
        parts, layout, owned = stratified_layout(sc, inputs, chunked, per_partition, params,
                                                 survey)
        partition_seconds = time.perf_counter() - started
        bias = bool(params.fit_intercept)
        mu = sum(entry[6] for entry in survey) / n_rows if bias else np.zeros(n_features)
        center = sc.broadcast(mu) if bias else None
        config = {"lam": params.lam, "theta": params.theta, "v": params.v, "seed": params.seed,
                  "fit_intercept": bias, "center": center}
        w = np.zeros(n_features + bias)  # (w, b') with an intercept, b' = b + wᵀμ
        if w0 is not None:
            w0 = np.asarray(w0, dtype=np.float64).reshape(-1)
            if w0.size not in (n_features, n_features + bias):
                raise ValueError(f"w0 must hold {n_features} weights"
                                 + (f" (or {n_features + 1}: weights, then the intercept)"
                                    if bias else "") + f", got {w0.size}.")
            w[:w0.size] = w0
            if bias:
                w[n_features] += float(w[:n_features] @ mu)
        # input chunks and dealt partitions both take turns in key order; no empty key
        if owned:
            if stores[0] is not None:
                _drop_everywhere(sc, stores[:1], inputs.store_dirs(), sc.defaultParallelism)
            if own_copy:
                per_partition.unpersist()
            blocks_ = _Blocks(sc, parts, range(parts.getNumPartitions()), stores[1])
        else:
            blocks_ = inputs
        keys = blocks_.keys

        def full_pass(w, with_norm=False):
            """(P(w), mean loss gradient[, largest centred ‖x‖²]): every partition's sums
            (Alg. 2 lines 6-8), added up on the driver in partition order (line 9)."""
            sums = blocks_.run(lambda _, X, y: _loss_and_gradient(X, y, w, config, with_norm))
            loss, grad = 0.0, np.zeros(w.size)
            for key in keys:
                loss += sums[key][0]
                grad += sums[key][1]
            weights = w[:n_features]
            result = (0.5 * float(weights @ weights) + loss / n_rows, grad / n_rows)
            return result + ((max(sums[key][2] for key in keys),) if with_norm else ())

        def raw_intercept(w):
            return float(w[n_features] - w[:n_features] @ mu) if bias else 0.0

        test_y = None if test is None else np.where(np.asarray(test[1]) == positive, 1.0, -1.0)
        scoring = 0.0
        sc.setJobDescription("DSVRG epoch 0: full gradient")
        objective, mean_grad, max_sq_norm = full_pass(w, with_norm=True)
        scale = params.lam / (1 - params.theta) ** 2
        l_max = 1.0 + scale * max(1.0, params.v) * (max_sq_norm + bias)
        step = params.step or step_for(l_max, n_rows)  # an epoch is n_rows steps
        turns = blocks_.turns()  # known once every block has been read
        layout += f"; {len(turns)} turn{'s' * (len(turns) > 1)} per epoch"
        history = []
        for epoch in range(1, params.epochs + 1):
            epoch_start = time.perf_counter()
            snapshot = w.copy()
            fixed = sc.broadcast((snapshot, mean_grad))  # w̃ and h for the whole epoch
            for turn in turns:  # round robin: one single-partition job per turn
                sc.setJobDescription(f"DSVRG epoch {epoch}: partitions {turn}'s turn")
                w = blocks_.chain(lambda k, X, y, w, e=epoch: _hop(
                    X, y, k, w, *fixed.value, step, config, e), w, turn)
            fixed.unpersist(blocking=False)
            sc.setJobDescription(f"DSVRG epoch {epoch}: full gradient")
            previous = objective
            objective, mean_grad = full_pass(w)
            entry = EpochStats(epoch, time.perf_counter() - epoch_start, objective)
            entry.elapsed = time.perf_counter() - started - scoring
            if test is not None:
                scoring_start = time.perf_counter()
                scores = test[0] @ w[:n_features] + raw_intercept(w)
                entry.test_accuracy = float(np.mean(np.where(scores > 0, 1.0, -1.0) == test_y))
                scoring += time.perf_counter() - scoring_start
            history.append(entry)
            if on_epoch is not None:
                on_epoch(entry)
            if not np.isfinite(objective):
                raise FloatingPointError(f"DSVRG diverged at epoch {epoch}: pass a smaller step.")
            if abs(previous - objective) <= params.tol * abs(objective):
                break
        train_seconds = time.perf_counter() - started - scoring
        intercept = raw_intercept(w)
    finally:
        if center is not None:
            center.unpersist(blocking=False)
        sc.setJobDescription("DSVRG: dropping resident blocks")
        if params.resident:
            try:
                written = [b.store_dirs() for b in (inputs, blocks_) if b is not None]
                _drop_everywhere(sc, stores, sorted(set(sum(written, []))),
                                 max(sc.defaultParallelism, 1))
            except Exception:  # the fit's own error (or a cancelled job) matters more
                pass
        if own_copy:
            per_partition.unpersist()
        if parts is not None and parts is not chunked:
            parts.unpersist()
        sc.setJobDescription(None)
    w = w[:n_features]
    model = KernelExpansion(w[None, :], np.ones((1, 1)), Kernel.create("linear"), classes,
                            np.array([intercept]) if bias else None)
    return DSVRGFit(w=w, model=model, intercept=intercept, epochs=history,
                    train_seconds=train_seconds,
                    partition_seconds=partition_seconds, n_rows=n_rows, step=step,
                    layout=layout, resident_hits=blocks_.hits, resident_misses=blocks_.misses)
