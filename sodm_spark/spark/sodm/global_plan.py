"""The global step before it runs: how many centres, which form, how many passes (docs/design.md
§2.9).

The global step fits the Nyström ODM of every training row on m centres, in one of two forms:

* ``normal``: each Newton step sums the piece's m × m normal matrix over the rows
  (:mod:`sodm_spark.models.nystroem_odm`): a pass costs n·m·(d + m) multiply-adds, and about
  :data:`EXPECTED_NORMAL_PASSES` passes fit;
* ``matrix-free``: each Newton step is solved by conjugate gradients on kernel products
  (:mod:`sodm_spark.models.nystroem_cg`): a pass costs one kernel entry per row and centre
  (n·m·d multiply-adds and n·m exponentials, none stored), a fit at one λ about
  :data:`EXPECTED_CG_PASSES` passes (the plan holds two λs of the path, :data:`PLANNED_PASSES`),
  and the driver factors two m × m matrices (m³ flops).

:func:`plan_global` measures what a kernel entry of a pass costs here (:func:`entry_seconds`:
the same loops on a small block, one core; only where the form depends on it), predicts both
forms' seconds for each m of :data:`CENTRE_LADDER`, and takes the most centres whose cheaper
form fits the step's time budget and the driver's memory (``centres`` given: that many, in the
cheaper form). The matrix-free fit then stops after as many passes as the budget holds.

Where the passes run is priced too (:data:`PLACES`): over the executors, each pass a Spark job
with its fixed cost (:data:`PASS_OVERHEAD_SECONDS`), or on the driver, which collects the
step's rows once (at most :data:`DRIVER_ROWS_BYTES` of them, in one job) and runs the same
task functions on the same records in the same order (:mod:`~sodm_spark.spark.in_process`),
one core a block.
On 2,711 rows × 10 inputs, 135 centres, the five normal-matrix passes took 8.1 s over the
executors (local[2]) for 0.06 s of kernel work a pass: small steps are all fixed cost there.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ...core.kernels import Kernel
from ...core.resources import available_memory_mb
from ...models import nystroem_odm
from ...models.nystroem_cg import PATH_FACTORS
from ...models.nystroem_passes import RowPasses
from .plan import gemm_flops_per_second

#: Passes a normal-matrix fit is expected to need: 4 measured on 290,000 flights rows and 6 on
#: 1,990,000 rows of the 12-column table, 1,000 centres each.
EXPECTED_NORMAL_PASSES = 5
#: Seconds a kernel entry costs a normal-matrix pass on one core besides the GEMMs: fitted to
#: the same two runs (6.2 s a pass at 290,000 × 1,000 × 36, 41 s at 1,990,000 × 1,000 × 12 on
#: two cores; the GEMMs alone at half the float32 speed predicted 4.9 s and 31 s).
NORMAL_SECONDS_PER_ENTRY = 1e-8
#: Passes a matrix-free fit is planned for: its first two Newton steps (from α = 0 the first
#: is the kernel ridge regression of the labels' band): on 2,400,000 rows × 8 columns of US
#: flights (min-max scaled, γ = 2 × scale, λ = 1e5), 1,000 centres, CG took 7 and 11 products
#: for them (9 and 21 passes with the line searches), and F was then within 1e-4 of where 88
#: passes left it.
EXPECTED_CG_PASSES = 20
#: Passes the centres are chosen for: the matrix-free fit walks λ's path
#: (:data:`~sodm_spark.models.nystroem_cg.PATH_FACTORS`), and the plan holds its first λ and
#: the next; a third runs on what the budget has left.
PLANNED_PASSES = 2 * EXPECTED_CG_PASSES
#: The most passes a budget buys a matrix-free fit: twice the plan's for each λ of the path;
#: past them a fit has converged to the accuracy the slice can see (the 1,000-centre fit
#: above: 36 passes to a relative decrease of 1e-5).
MOST_PASSES = len(PATH_FACTORS) * 2 * EXPECTED_CG_PASSES
#: At least this many rows a centre: m near n is the exact kernel problem, which the levels
#: (or level 0) solve, and whose K_ZZ is as ill-conditioned as the data's kernel.
ROWS_PER_CENTRE = 20
#: A pass's fixed cost on the cluster: a Spark job over the rows' 8 blocks
#: (:data:`~.global_rows.PASS_BLOCKS`), their tasks, the broadcast and the sums' collection;
#: and the jobs every fit runs besides its passes (the centres drawn, the rows' total weight,
#: the level's model at the centres). Measured with the job on 290,000 New York flights rows
#: × 36 columns (local[2]): 1,500 centres, 42 passes and the other jobs in 74.2 s, of which
#: the passes' kernel work (3.0 ns an entry of a Hessian pass, 3.8 of a line pass, on one
#: core) is 0.74 s a pass.
PASS_OVERHEAD_SECONDS, SETUP_JOBS = 1.0, 3
#: The centres tried, in order; at least the first is used whatever the budget.
CENTRE_LADDER = (500, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 8000, 10000, 12000, 15000,
                 20000)
#: The driver keeps two m × m float64 matrices (T and A) and, while factoring, a third: at most
#: this share of the memory available.
DRIVER_MEMORY_SHARE = 0.5
#: The m × m factorizations run at about this share of the float32 GEMM speed (float64, LAPACK).
FACTOR_SPEED_SHARE = 0.3

FORMS = ("matrix-free", "normal")
#: Where the passes run: over the executors (a Spark job a pass) or on the driver.
PLACES = ("executors", "driver")
#: The most bytes of the step's rows (float32 inputs, and a label, weight and id a row) the
#: driver collects to run the passes itself: well within the driver's result limit (1g here)
#: and its memory. The driver's prices are measured on steps of thousands of rows, where a
#: pass's fixed cost on the cluster is all it costs; steps of 290,000 flights rows × 36
#: columns (49 MB) and up, whose timings fitted the executors' prices, stay there.
DRIVER_ROWS_BYTES = 16 * 2**20
#: Bytes a second the driver collects the rows at (pickled blocks through the JVM or Arrow).
COLLECT_BYTES_PER_SECOND = 100 * 2**20
#: The least time budget of a global step: below it a step of the ladder's first rung on a
#: table of 10^5-10^6 rows does not reach its second Newton step.
GLOBAL_MIN_BUDGET = 60.0


def after_levels_budget(elapsed: float, time_budget: float | None) -> float:
    """The time budget of a global step after the levels: as long again as the training
    before it took (``elapsed`` seconds: a step that costs more than the fit it stands beside
    has to pay for itself), at least :data:`GLOBAL_MIN_BUDGET`, and within what
    ``time_budget`` (training seconds) has left."""
    budget = max(GLOBAL_MIN_BUDGET, elapsed)
    return budget if time_budget is None else max(0.0, min(budget, time_budget - elapsed))


def instead_of_levels_budget(predicted_levels: float, command_so_far: float,
                             time_budget: float | None, elapsed: float) -> float:
    """The time budget of a global step that runs instead of the levels: the seconds the
    levels it replaces were predicted to take (``predicted_levels``: the top level and the one
    merge below it, the least the stop rule runs), but no longer than the command has run so
    far (``command_so_far``: start-up, reading, the search; the step may double the wait, as
    the step after the levels may double the fit), at least :data:`GLOBAL_MIN_BUDGET`, and
    within what ``time_budget`` (training seconds) has left after ``elapsed``. On 2,400,000
    flights rows the cost model predicted 663 s for levels 6 and 5 (252 s measured in another
    run): 12,000 centres, 640 s predicted, past the ten minutes such a command is to take;
    its 600,000 test rows gain nothing from 5,000 centres up (0.8038, 0.8040, 0.8026 with
    5,000, 10,000, 20,000 on one GPU, docs/results/global_step/)."""
    budget = max(GLOBAL_MIN_BUDGET, min(predicted_levels, command_so_far))
    return budget if time_budget is None else max(0.0, min(budget, time_budget - elapsed))


@dataclass(frozen=True)
class GlobalPlan:
    """The global step before it runs: its shape, form, budget and predicted seconds."""

    rows: int
    centres: int
    inputs: int
    reason: str
    form: str  # "matrix-free" or "normal" (module docstring)
    work_per_pass: float  # multiply-adds a pass
    passes: int  # the passes it is planned for (the matrix-free fit stops there)
    predicted_seconds: float
    budget_seconds: float | None  # the step's time budget (None: none)
    # measured: a kernel entry of a pass on one core (None: not measured, the normal form
    # being cheaper whatever it costs)
    entry_seconds: float | None
    place: str = "executors"  # where the passes run (PLACES)
    other_place_seconds: float | None = None  # the form's predicted seconds in the other place

    def describe(self) -> str:
        budget = "" if self.budget_seconds is None else \
            f" within a budget of {self.budget_seconds:,.0f} s"
        return (f"global step ({self.reason}): Nyström ODM on {self.rows:,} rows x "
                f"{self.centres:,} centres x {self.inputs:,} inputs, {self.form} "
                f"on the {self.place} "
                f"({self.work_per_pass:.2g} multiply-adds a pass"
                + ("" if self.entry_seconds is None
                   else f", {self.entry_seconds * 1e9:.2f} ns a kernel entry")
                + f"), about {self.passes} "
                f"passes, predicted {self.predicted_seconds:,.0f} s{budget}")


def entry_seconds(kernel: Kernel, inputs: int, rows: int = 4096, centres: int = 512) -> float:
    """Seconds a kernel entry of a matrix-free pass costs on one core here: the Hessian pass
    of :class:`~sodm_spark.models.nystroem_passes.RowPasses` on ``rows`` × ``centres`` random
    rows of ``inputs`` columns (after a first call of each pass, which compiles the loops)."""
    rng = np.random.default_rng(0)
    X = rng.random((rows, inputs), dtype=np.float32)
    Z = rng.random((centres, inputs))
    passes = RowPasses(kernel, Z, X, np.where(rng.random(rows) < 0.5, 1.0, -1.0), None, 0.1,
                       0.2, threads=1)
    coef = rng.normal(size=centres) * 1e-3
    # the first calls compile both loops (numba's cache on disk then serves the executors)
    passes.line(coef, coef, (1.0, 0.0))
    passes.hessian(coef, coef)
    # the least of three: on a driver whose executors still wind down, one timing read
    # 5.1 ns where the passes then ran at 3.0
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        passes.hessian(coef, coef)
        timings.append(time.perf_counter() - started)
    return max(min(timings), 1e-9) / (rows * centres)


def rows_bytes(n_rows: int, inputs: int) -> int:
    """Bytes of the step's rows as its passes hold them: float32 inputs, a float64 label and
    weight and an int64 id a row."""
    return n_rows * (4 * inputs + 24)


def setup_seconds(n_rows: int, inputs: int, place: str) -> float:
    """Predicted seconds of a fit's jobs besides its passes: over the executors
    :data:`SETUP_JOBS` jobs; on the driver one, the level's rows collected (a job, and their
    bytes at :data:`COLLECT_BYTES_PER_SECOND`), after which the centres' draw, the rows'
    total weight and the level's model at the centres cost no job."""
    if place == "executors":
        return SETUP_JOBS * PASS_OVERHEAD_SECONDS
    return PASS_OVERHEAD_SECONDS + rows_bytes(n_rows, inputs) / COLLECT_BYTES_PER_SECOND


def pass_seconds(kernel_seconds: float, cores: int, place: str) -> float:
    """Predicted seconds of a pass whose one-core work is ``kernel_seconds``: over the
    executors spread over the cores, with a job's fixed cost; on the driver on one core (the
    blocks one after another, each on one thread and its GEMMs on one BLAS thread, as a task
    runs it: the same bits)."""
    if place == "executors":
        return kernel_seconds / cores + PASS_OVERHEAD_SECONDS
    return kernel_seconds


def matrix_free_seconds(n_rows: int, centres: int, cores: int, entry: float,
                        passes: int, place: str = "executors", inputs: int = 0) -> float:
    """Predicted seconds of a matrix-free fit in ``place``: ``passes`` passes of n·m entries
    (:func:`pass_seconds`), the driver's two factorizations and the other jobs
    (:func:`setup_seconds`; ``inputs``: the rows' columns, for the bytes the driver
    collects)."""
    factor = centres ** 3 / (FACTOR_SPEED_SHARE * gemm_flops_per_second() * cores)
    return passes * pass_seconds(n_rows * centres * entry, cores, place) + factor + \
        setup_seconds(n_rows, inputs, place)


def normal_seconds(n_rows: int, centres: int, inputs: int, cores: int,
                   place: str = "executors") -> float:
    """Predicted seconds of a normal-matrix fit in ``place``: :data:`EXPECTED_NORMAL_PASSES`
    passes (:func:`pass_seconds`), each its GEMMs at half the float32 speed of a core and
    :data:`NORMAL_SECONDS_PER_ENTRY` a kernel entry, and the fit's other jobs."""
    work = nystroem_odm.pass_work(n_rows, centres, inputs)
    one_core = 2.0 * work / (0.5 * gemm_flops_per_second()) + \
        NORMAL_SECONDS_PER_ENTRY * n_rows * centres
    return EXPECTED_NORMAL_PASSES * pass_seconds(one_core, cores, place) + \
        setup_seconds(n_rows, inputs, place)


def most_centres_in_memory(memory_mb: float | None = None) -> int:
    """The most centres whose three m × m float64 matrices fit
    :data:`DRIVER_MEMORY_SHARE` of the driver's available memory."""
    memory_mb = available_memory_mb() if memory_mb is None else memory_mb
    return max(CENTRE_LADDER[0], int(math.sqrt(DRIVER_MEMORY_SHARE * memory_mb * 2**20 / 24)))


def plan_global(n_rows: int, inputs: int, cores: int, reason: str, kernel: Kernel,
                budget_seconds: float | None = None, centres: int | None = None) -> GlobalPlan:
    """The plan of the global step (module docstring) on ``n_rows`` rows of ``inputs``
    columns over ``cores`` cores: ``centres`` given, that many (at most the rows) in the
    cheaper form; else the most of :data:`CENTRE_LADDER` (at most the rows and what the
    driver's memory holds, at most one a :data:`ROWS_PER_CENTRE` rows) whose cheaper form fits
    ``budget_seconds`` (None: the most the memory holds), at least the ladder's first (or
    that cap, below it). The form is the one cheaper over the executors; it runs in the
    cheaper of :data:`PLACES` (the driver only for rows within :data:`DRIVER_ROWS_BYTES`)."""
    cores = max(1, cores)
    places = [place for place in PLACES
              if place == "executors" or rows_bytes(n_rows, inputs) <= DRIVER_ROWS_BYTES]
    measured: list[float] = []

    def entry() -> float:
        # measured once, where the form depends on it: the first measurement compiles the
        # passes' loops (22 s where numba's cache is cold, as on a cluster's driver that
        # imports a zipped package)
        if not measured:
            measured.append(entry_seconds(kernel, inputs))
        return measured[0]

    def form_of(m):
        # the forms compared at one λ each over the executors, where a pass's fixed cost
        # favours the form of fewer passes; the driver runs the form the executors would.
        # Where the matrix-free form's fixed costs alone exceed the normal form's seconds,
        # the normal form is cheaper whatever a kernel entry costs.
        normal = normal_seconds(n_rows, m, inputs, cores)
        if matrix_free_seconds(n_rows, m, cores, 0.0, EXPECTED_CG_PASSES) > normal:
            return "normal"
        matrix_free = matrix_free_seconds(n_rows, m, cores, entry(), EXPECTED_CG_PASSES)
        return "normal" if matrix_free > normal else "matrix-free"

    def seconds_of(m, form, place):
        # the matrix-free form planned for λ's path
        return normal_seconds(n_rows, m, inputs, cores, place) if form == "normal" else \
            matrix_free_seconds(n_rows, m, cores, entry(), PLANNED_PASSES, place, inputs)

    def cheaper(m):
        # (form, seconds, place) of the cheaper place, and the other place's seconds
        form = form_of(m)
        priced = sorted((seconds_of(m, form, place), place) for place in places)
        return form, priced[0][0], priced[0][1], priced[1][0] if len(priced) > 1 else None

    if centres is None:
        most = min(max(n_rows // ROWS_PER_CENTRE, 1), most_centres_in_memory())
        ladder = [m for m in CENTRE_LADDER if m <= most] or [min(most, CENTRE_LADDER[0])]
        centres = ladder[0]
        for m in ladder:
            if budget_seconds is None or cheaper(m)[1] <= budget_seconds:
                centres = m
    centres = max(1, min(int(centres), n_rows))
    form, seconds, place, other_seconds = cheaper(centres)
    passes = PLANNED_PASSES
    if form == "matrix-free" and budget_seconds is not None:
        # as many passes as the budget holds beside the factorizations, at least the plan's
        per_pass = pass_seconds(n_rows * centres * entry(), cores, place)
        factor = matrix_free_seconds(n_rows, centres, cores, entry(), 0, place, inputs)
        passes = min(MOST_PASSES, max(PLANNED_PASSES,
                                      int((budget_seconds - factor) // per_pass)))
        seconds = matrix_free_seconds(n_rows, centres, cores, entry(), passes, place, inputs)
    elif form == "normal":
        passes = EXPECTED_NORMAL_PASSES
    work = (nystroem_odm.pass_work(n_rows, centres, inputs) if form == "normal"
            else float(n_rows) * centres * inputs)
    return GlobalPlan(n_rows, centres, inputs, reason, form, work, passes, seconds,
                      budget_seconds, measured[0] if measured else None, place,
                      other_seconds)
