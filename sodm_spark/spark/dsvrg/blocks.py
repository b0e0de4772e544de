"""The blocks DSVRG (:mod:`.fit`) works on: the input cut into chunks, each Spark partition
stacked into one (X, y), and kept resident in executor-local files between Spark jobs.

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
directory when it stops). :class:`ResidentBlocks` is the driver's side of all this.

**Input chunks.** The first pass reads the input in one task per core (``coalesce``, no
shuffle) and cuts it into chunks of at most 8 MB, each a partition of Alg. 2 named by its first
row id when the input already looks like the whole (else rows are dealt by stratum into
``n_partitions``): few Spark tasks, and blocks small enough for the SVRG steps' random walk to
stay in cache (:func:`input_chunks`).
"""
from __future__ import annotations

import itertools
import os
import shutil
import socket
import tempfile

import numpy as np
import scipy.sparse

from ...core.labels import plus_minus
from ...core.sparse_rows import dense_if_full

# --- input chunks and stacked partitions ------------------------------------------------------

CHUNK_BYTES = 8 << 20


def partition_chunks(index, blocks, positive):
    """An input partition's rows as (index, (X, ±1 y, ids)) chunks of at most ~8 MB; rows with
    a weight column's weight s_i carry ±s_i as y (DSVRGTaskSettings.labels_and_weights reads
    both back), so the stacked and resident (X, y) blocks need no third array.

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
        y = plus_minus(block.y, positive)
        weights = block[3] if len(block) > 3 else None
        if weights is not None:
            y = y * weights
        for start in range(0, n, step):
            rows = slice(start, start + step)
            yield index, (block.X[rows], y[rows], block.row_ids[rows])


def input_chunks(blocks, positive):
    """A coalesced input task's rows as (key, (X, ±1 y, ids)) chunks of at most ~8 MB, each
    its own key: the row id of its first row (content, not placement, names a chunk, so
    seeds and the round robin's order do not depend on how Spark grouped the partitions).

    Reading the input in one task per core instead of one per partition saves Spark's cost
    per Python task (~80 ms here: 33 partitions of 10^6 rows took 1.3 s to hand over, 0.3 s
    coalesced); keying each chunk keeps the blocks the SVRG steps walk at random small enough
    for the cache (45 ns a step on 30,000 × 50 rows, 200 ns on 125,000 × 50).
    """
    return keyed_by_first_row(partition_chunks(0, blocks, positive))


def keyed_by_first_row(records):
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


def _stack_partition(items):
    """A Spark partition's (key, (X, y, ...)) records as one (X, y): keys in order, records of
    one key in the order the partition yields them (the same on every read of a cached RDD)."""
    by_key: dict = {}
    for key, value in items:
        by_key.setdefault(key, []).append(value)
    if not by_key:
        return None
    X, y = _stack([value for key in sorted(by_key) for value in by_key[key]])
    return dense_if_full(X), y  # a CSR block at least half full is solved dense


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


def drop_everywhere(sc, stores, store_dirs, n_tasks):
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


def first_read(sc, data, store, fn):
    """One read of every key of ``data`` (an RDD of (key, chunk) records): each key's chunks
    stacked, made resident in ``store`` (not when None) and ``fn(key, X, y)`` applied. Returns
    [(Spark partition, key, fingerprint, (host, block directory or None), fn(key, X, y))] in
    key order."""
    return sorted(sc.runJob(data.mapPartitionsWithIndex(
        lambda task, it: _tagged(task, _on_data_keys(it, None, store, fn))),
        lambda it: it), key=lambda entry: entry[1])


class ResidentBlocks:
    """The partitions of one fit as seen by the driver: ``run(fn, keys)`` →
    {key: fn(key, X, y)}, from the resident files where they are, else from the persisted RDD
    ``data`` (key k sits in Spark partition ``partition_of(k)``), which makes them resident.
    ``found``: the (key, fingerprint, (host, block directory)) of blocks already read (as
    :func:`first_read` returns them, without the partition and fn's result). Handle tasks are
    not placed (PySpark cannot ask for a host without reading the cached partition), so a block
    is found by any executor on the host that wrote it; once misses outnumber hits by more than
    a round (many hosts), the fit stops looking and reads the persisted RDD directly."""

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
        for _, resident in itertools.groupby(
                keys, key=lambda key: self.where.get(key, (None, None))[0]):
            run = list(resident)
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
                # the task binds this turn's keys and w (runJob runs it before they change)
                done, w = self.sc.runJob(self.handles.mapPartitions(
                    lambda _, *, todo=todo, located=located, w=w:
                    _chain_resident(todo, located, hop, w)), lambda it: it,
                    partitions=[0])[0]
                self.hits += done
                keys = keys[done:]
                if not keys:
                    break
                self.misses += 1
            key, w_in = keys[0], w
            w = self.run(lambda k, X, y, *, w_in=w_in: hop(k, X, y, w_in), keys=[key],
                         resident=False)[key]
            keys = keys[1:]
        return w

