"""When SODM stops merging, and which rows it validates on (no Spark).

Algorithm 1 of the SODM paper merges until one partition is left or every partition is
already optimal at its warm start (line 5). A user rarely wants the last merges: each one
costs about p times the level before it (the kernel work of a level with k partitions of m rows
is k·m²·d) and buys less accuracy. :class:`StopRule` ends a fit earlier on two measured signals:

* ``min_improvement``: the last merge raised the validation accuracy by less than this
  (absolute, 0.002 = 0.2 points), so the next, dearer merge is not expected to pay;
* ``time_budget``: the next level's predicted seconds (:func:`predict_seconds`, from the cost
  of the levels solved so far) would end the fit after this many seconds.

The model kept is the best level seen (:func:`best_level`): with a non-negative
``min_improvement`` that is the last level or the one before it. The validation rows are held
out of the training rows by :func:`holdout_mask`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# reasons written to the metrics JSON (``stop_reason``)
REACHED_STOP_LEVEL = "reached stop level"
WARM_START_OPTIMAL = "every partition optimal at its warm start"
SMALL_IMPROVEMENT = "validation improvement below min_improvement"
TIME_BUDGET = "next level would exceed time_budget"
NEXT_LEVEL_BLOCKED = "next level's kernels would not be cached with every core solving"


@dataclass(frozen=True)
class LevelCost:
    """What :func:`predict_seconds` needs of one level: its shape and measured seconds."""

    partitions: int
    rows: int  # rows of the largest partition
    seconds: float


def work_per_core(partitions: int, rows: int, cores: int) -> float:
    """Kernel work of a level in units of one row pair, per core that runs at once.

    A partition of m rows computes an m×m kernel; ``partitions`` of them run
    ``min(partitions, cores)`` at a time, and a level with fewer partitions than cores gives
    each task the idle cores' BLAS threads, so the level's time tracks this quotient.
    """
    return partitions * float(rows) ** 2 / max(1, min(partitions, cores))


def predict_seconds(done: list[LevelCost], next_partitions: int, next_rows: int,
                    cores: int) -> float | None:
    """Seconds the next level should take, from the levels measured so far (None before any).

    Fits ``seconds = overhead + rate · work`` (:func:`work_per_core`) through the last two
    levels (one level: no overhead, the whole time scales with the work), both terms kept
    non-negative. The overhead (task launch, the merge shuffle) is what keeps the
    coarse levels from being free; the rate term dominates the merged levels.
    """
    if not done:
        return None
    work = [work_per_core(level.partitions, level.rows, cores) for level in done[-2:]]
    seconds = [level.seconds for level in done[-2:]]
    target = work_per_core(next_partitions, next_rows, cores)
    if len(work) == 2 and work[1] > work[0]:
        rate = max(0.0, (seconds[1] - seconds[0]) / (work[1] - work[0]))
        overhead = max(0.0, seconds[1] - rate * work[1])
        if rate > 0.0:
            return overhead + rate * target
    return seconds[-1] * target / max(work[-1], 1.0)


def best_level(accuracies: list[tuple[int, float]]) -> int:
    """The level with the highest validation accuracy; on a tie the later (more merged) one."""
    if not accuracies:
        raise ValueError("no level has a validation accuracy yet")
    best_level_, best = accuracies[0]
    for level, accuracy in accuracies[1:]:
        if accuracy >= best:
            best_level_, best = level, accuracy
    return best_level_


@dataclass(frozen=True)
class StopRule:
    """Automatic stopping between levels (see the module docstring); ``None`` disables a test."""

    min_improvement: float | None = 0.002
    time_budget: float | None = None

    def validate(self) -> None:
        if self.min_improvement is not None and not self.min_improvement >= 0.0:
            raise ValueError(f"min_improvement must be >= 0 (an accuracy difference, e.g. "
                             f"0.002 for 0.2 points), got {self.min_improvement!r}.")
        if self.time_budget is not None and not self.time_budget > 0.0:
            raise ValueError(f"time_budget must be a positive number of seconds, got "
                             f"{self.time_budget!r}.")

    def reason_to_stop(self, accuracies: list[float], elapsed: float,
                       next_seconds: float | None) -> str | None:
        """Why the fit should stop before the next level, or None to go on.

        ``accuracies`` are the validation accuracies of the levels solved so far, in order;
        ``elapsed`` the seconds spent; ``next_seconds`` the next level's prediction.
        """
        if (self.min_improvement is not None and len(accuracies) >= 2
                and accuracies[-1] - accuracies[-2] < self.min_improvement):
            return SMALL_IMPROVEMENT
        if (self.time_budget is not None and next_seconds is not None
                and elapsed + next_seconds > self.time_budget):
            return TIME_BUDGET
        return None


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mix (splitmix64's finalizer): nearby ids give unrelated outputs."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def holdout_mask(row_ids, seed: int, fraction: float) -> np.ndarray:
    """True for the rows held out for validation: a seeded hash of each row id below
    ``fraction``. It depends on the row id and the seed only, so any block layout, a retried
    task and a resumed fit hold out the same rows."""
    ids = np.asarray(row_ids, dtype=np.int64).astype(np.uint64)
    mixed = _splitmix64(ids ^ _splitmix64(np.array([seed], dtype=np.int64).astype(np.uint64)))
    return (mixed >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 < fraction
