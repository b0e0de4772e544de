"""sodm_spark.core.worker_heap: a reused Spark Python worker freezes what survives each full
collection, still frees reference cycles created since, and scans the whole heap again every
FULL_SCAN_EVERY full collections."""
import gc
import weakref

from sodm_spark.core import worker_heap


class _Node:
    """An object that can sit in a reference cycle and be watched by a weak reference."""

    def __init__(self):
        self.me = self


def _cycle():
    node = _Node()
    return weakref.ref(node)  # the node lives on only through its own cycle


def test_survivors_are_frozen_and_new_cycles_are_still_collected():
    assert not worker_heap.in_reused_spark_worker()  # pytest's process: nothing installed
    assert worker_heap.install() is False and worker_heap.freeze_survivors not in gc.callbacks
    gc.callbacks.append(worker_heap.freeze_survivors)
    worker_heap._full_collections[0] = 0
    try:
        gc.collect()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # everything that survived: the imported modules and more
        assert gc.get_objects(generation=2) == []  # nothing left for a full scan to visit
        new = _cycle()
        gc.collect()  # created after the freeze: scanned, and its cycle freed
        assert new() is None
        # a cycle that survived a collection is frozen with the rest, then dropped
        keep = _Node()
        gc.collect()
        held = weakref.ref(keep)
        del keep
        gc.collect()
        assert held() is not None  # frozen: this collection did not visit it
        # ... until the whole-heap scan, at most FULL_SCAN_EVERY full collections later
        scans = 0
        while held() is not None and scans < worker_heap.FULL_SCAN_EVERY:
            gc.collect()
            scans += 1
        assert held() is None
        assert 1 <= scans <= worker_heap.FULL_SCAN_EVERY
    finally:
        gc.callbacks.remove(worker_heap.freeze_survivors)
        gc.unfreeze()
        gc.collect()


def test_the_spark_workers_install_it_and_keep_their_heap_frozen(spark):
    """In the local session's Python workers: installed on the package's import, and after
    a task the worker's survivors sit frozen; the driver installs nothing."""
    def probe(_):
        import gc

        from sodm_spark.core import worker_heap
        gc.collect()
        yield (worker_heap.in_reused_spark_worker(),
               worker_heap.freeze_survivors in gc.callbacks, gc.get_freeze_count() > 10_000)

    sc = spark.sparkContext
    assert sc.parallelize(range(4), 2).mapPartitions(probe).collect() == [(True, True, True)] * 2
    assert worker_heap.freeze_survivors not in gc.callbacks
