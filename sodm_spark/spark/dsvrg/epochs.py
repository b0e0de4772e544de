"""The epochs of DSVRG (SODM paper, Algorithm 2; docs/design.md §3): the linear-kernel ODM
primal as the partitions sum it, the full gradient at each epoch's snapshot, and the round
robin of SVRG steps that hands w from partition to partition.

:func:`~.fit.fit_dsvrg` sets up the primal from its survey of the rows (a
:class:`PrimalSetup`), starts w (:func:`initial_w`) and runs :func:`run_epochs` over the
partitions' resident blocks (:mod:`.blocks`). The functions shipped to tasks
(:func:`_loss_and_gradient`, :func:`_hop`) are module-level and take plain values and the
frozen :class:`DSVRGTaskSettings`; the numerics are ``sodm_spark.solvers.svrg``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ...core.errors import SettingsError
from ...core.labels import accuracy_of_scores, coded_classes
from ...core.weights import combined_weights, row_weights
from ...solvers.dcd_settings import ODMHyperparameters
from ...solvers.svrg import (Snapshot, epoch_rng, loss_gradient_sum, row_sq_norms,
                             sample_rows, step_for, svrg_inner)
from ..records import StatsRecord
from .blocks import ResidentBlocks

if TYPE_CHECKING:
    from pyspark import Broadcast

    from .fit import DSVRGParams


@dataclass(frozen=True)
class DSVRGTaskSettings:
    """What every DSVRG partition task reads besides w: the ODM loss, the intercept and the
    seed of the row draws (built once per fit by :func:`~.fit.fit_dsvrg`)."""

    lam: float
    theta: float
    v: float
    fit_intercept: bool
    seed: int  # partition k draws its rows of epoch e from epoch_rng([seed, k], e)
    center: Broadcast[np.ndarray] | None = None  # of the column means μ (with the intercept)
    # (weight of the -1 rows, of the +1 rows) and M/S: a row's loss gradient in a step is
    # times M·s_i/S (solvers.svrg.row_factors); None: unweighted
    class_weights: tuple | None = None
    weight_scale: float = 1.0
    row_weighted: bool = False  # y holds ±s_i, the rows' weight column (blocks.partition_chunks)

    def labels_and_weights(self, y):
        """(±1 labels, each row's s_i: its weight column's times its class's, or None)."""
        if not self.row_weighted:
            return y, row_weights(y, self.class_weights)
        signs = np.sign(y)
        return signs, combined_weights(np.abs(y), self.class_weights, signs)

    def row_factor(self, weights):
        """Each row's M·s_i/S for its weights ``weights``, or None (unweighted)."""
        return None if weights is None else weights * self.weight_scale

    def center_value(self):
        """μ on the executor (the rows are centred with it), or None."""
        return None if self.center is None else self.center.value


@dataclass
class EpochStats(StatsRecord):
    """One epoch: what the job prints and writes to the metrics JSON."""

    epoch: int
    seconds: float
    objective: float
    elapsed: float = 0.0  # since the fit started, partitioning included, test scoring excluded
    test_accuracy: float | None = None


def _loss_and_gradient(X, y, w, settings: DSVRGTaskSettings, with_norm=False):
    """The partition's (loss sum, gradient sum) at w; with ``with_norm`` also its largest
    ‖x_i - μ‖² (the step's L_max on centred rows, known once μ is)."""
    center = settings.center_value()
    y, weights = settings.labels_and_weights(y)
    sums = loss_gradient_sum(w, X, y, settings.lam, settings.theta, settings.v,
                             settings.fit_intercept, center, weights)
    if not with_norm:
        return sums
    factor = settings.row_factor(weights)
    if factor is None:
        return sums + (float(row_sq_norms(X, center).max()),)
    # weighted: each row's smoothness term times its factor, the intercept's 1 included
    return sums + (float(((row_sq_norms(X, center) + settings.fit_intercept) * factor).max()),)


def _hop(X, y, key, w, snapshot, mean_grad, step, settings: DSVRGTaskSettings, epoch):
    """One partition's turn: SVRG steps over its own rows without replacement (Alg. 2 l. 14)."""
    rows = sample_rows(X.shape[0], X.shape[0], epoch_rng([settings.seed, key], epoch))
    y, weights = settings.labels_and_weights(y)
    return svrg_inner(w, Snapshot(snapshot, mean_grad), X, y, rows, step,
                      ODMHyperparameters(settings.lam, settings.theta, settings.v),
                      settings.fit_intercept, settings.center_value(), settings.row_factor(weights))


@dataclass(frozen=True)
class PrimalSetup:
    """The ODM primal the epochs minimize (docs/design.md §3), as the survey found the rows."""

    settings: DSVRGTaskSettings
    mu: np.ndarray  # the column means the rows are centred by (zeros without an intercept)
    total_weight: float  # S: the rows' total weight (their number, unweighted)
    n_rows: int
    n_features: int

    @property
    def bias(self) -> bool:
        return self.settings.fit_intercept

    def raw_intercept(self, w) -> float:
        """b of f(x) = wᵀx + b from the centred (w, b' = b + wᵀμ)."""
        n = self.n_features
        return float(w[n] - w[:n] @ self.mu) if self.bias else 0.0


class EpochsRun(NamedTuple):
    """What :func:`run_epochs` ends with."""

    w: np.ndarray  # (w, b') with an intercept
    history: list  # EpochStats, one per epoch
    step: float
    turns: int  # jobs per epoch of the round robin
    scoring_seconds: float  # spent scoring the test rows (not training time)


def initial_w(w0, primal: PrimalSetup) -> np.ndarray:
    """The epochs' start (w, b' = b + wᵀμ with an intercept): ``w0`` (d weights, or d+1:
    weights, then the intercept), else zeros."""
    n_features, bias = primal.n_features, primal.bias
    w = np.zeros(n_features + bias)
    if w0 is None:
        return w
    w0 = np.asarray(w0, dtype=np.float64).reshape(-1)
    if w0.size not in (n_features, n_features + bias):
        raise SettingsError(f"w0 must hold {n_features} weights"
                            + (f" (or {n_features + 1}: weights, then the intercept)"
                               if bias else "") + f", got {w0.size}.")
    w[:w0.size] = w0
    if bias:
        w[n_features] += float(w[:n_features] @ primal.mu)
    return w


def _full_pass(blocks: ResidentBlocks, primal: PrimalSetup, w, with_norm=False):
    """(P(w), mean loss gradient[, largest centred ‖x‖²]): every partition's sums (Alg. 2
    lines 6-8), added up on the driver in partition order (line 9)."""
    settings, keys = primal.settings, blocks.keys
    sums = blocks.run(lambda _, X, y: _loss_and_gradient(X, y, w, settings, with_norm))
    loss, grad = 0.0, np.zeros(w.size)
    for key in keys:
        loss += sums[key][0]
        grad += sums[key][1]
    weights = w[:primal.n_features]
    result = (0.5 * float(weights @ weights) + loss / primal.total_weight,
              grad / primal.total_weight)
    return result + ((max(sums[key][2] for key in keys),) if with_norm else ())


def _step_size(params: DSVRGParams, primal: PrimalSetup, max_sq_norm: float) -> float:
    """The SVRG step: ``params.step``, else from the loss's smoothness L_max over the rows (an
    epoch is one step per row)."""
    loss_scale = params.lam / (1 - params.theta) ** 2
    # weighted: max_sq_norm already holds the intercept's 1 and each row's factor
    settings = primal.settings
    weighted = settings.class_weights is not None or settings.row_weighted
    l_max = 1.0 + loss_scale * max(1.0, params.v) * (
        max_sq_norm + (0.0 if weighted else primal.bias))
    return params.step or step_for(l_max, primal.n_rows)


def run_epochs(sc, blocks: ResidentBlocks, primal: PrimalSetup, params: DSVRGParams, w,
               test_pair, on_epoch, started: float) -> EpochsRun:
    """The epochs from ``w``: the full gradient, then the round robin, until ``params.epochs``
    or an objective that changes by at most ``relative_change_tol`` of itself. Each epoch is
    reported to ``on_epoch`` with its accuracy on ``test_pair`` (X, ±1 y) when given."""
    sc.setJobDescription("DSVRG epoch 0: full gradient")
    objective, mean_grad, max_sq_norm = _full_pass(blocks, primal, w, with_norm=True)
    step = _step_size(params, primal, max_sq_norm)
    turns = blocks.turns()  # known once every block has been read
    history, scoring = [], 0.0
    for epoch in range(1, params.epochs + 1):
        epoch_start = time.perf_counter()
        w = _round_robin(sc, blocks, primal.settings, turns, w, mean_grad, step, epoch)
        sc.setJobDescription(f"DSVRG epoch {epoch}: full gradient")
        previous = objective
        objective, mean_grad = _full_pass(blocks, primal, w)
        entry = EpochStats(epoch, time.perf_counter() - epoch_start, objective)
        entry.elapsed = time.perf_counter() - started - scoring
        if test_pair is not None:
            scoring_start = time.perf_counter()
            scores = test_pair[0] @ w[:primal.n_features] + primal.raw_intercept(w)
            entry.test_accuracy = accuracy_of_scores(scores, test_pair[1], coded_classes(2))
            scoring += time.perf_counter() - scoring_start
        history.append(entry)
        if on_epoch is not None:
            on_epoch(entry)
        if not np.isfinite(objective):
            raise FloatingPointError(f"DSVRG diverged at epoch {epoch}: pass a smaller step.")
        if abs(previous - objective) <= params.relative_change_tol * abs(objective):
            break
    return EpochsRun(w, history, step, len(turns), scoring)


def _round_robin(sc, blocks: ResidentBlocks, settings: DSVRGTaskSettings, turns, w,
                 mean_grad, step: float, epoch: int) -> np.ndarray:
    """One epoch's round robin (Alg. 2 lines 10-20) from w, whose mean loss gradient is
    ``mean_grad``: one single-partition job per turn, w handed from partition to partition."""
    # the snapshot w̃ and h for the whole epoch; typed as a pair so that mypy matches the
    # unpacked value to two of _hop's arguments
    fixed: Broadcast[tuple[np.ndarray, np.ndarray]] = sc.broadcast((w.copy(), mean_grad))
    for turn in turns:
        sc.setJobDescription(f"DSVRG epoch {epoch}: partitions {turn}'s turn")
        w = blocks.chain(lambda k, X, y, w: _hop(X, y, k, w, *fixed.value, step, settings,
                                                 epoch), w, turn)
    fixed.unpersist(blocking=False)
    return w
