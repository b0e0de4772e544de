"""The knobs and records of one SODM fit (SODM paper, Algorithm 1; docs/design.md §2).

:class:`SODMParams` holds every parameter (p, L, the S strata of Eqns 7-8, the partitioner,
the warm start, automatic stopping); :class:`LevelPlan` announces a level before it runs,
:class:`LevelStats` records it after (a row of the metrics JSON, a
:class:`~sodm_spark.spark.records.StatsRecord` as DSVRG's records are) and :class:`SODMFit` is
the result of :func:`.fit.fit_sodm`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from ...core import defaults
from ...core.array_namespace import check_device
from ...core.errors import SettingsError, refused_as_settings
from ...core.kernels import Kernel
from ...core.validation import check_positive_int
from ...core.weights import ClassWeight, canonical_class_weight
from ...models.calibration import CALIBRATIONS
from ...models.expansion import KernelExpansion
from ...selection.stopping import StopRule
from ...solvers.local_solve import LocalSolve
from ..partitioning import LANDMARK_CANDIDATES, Partitioning
from ..records import StatsRecord

WARM_STARTS = ("scaled", "concat")
SCALINGS = ("minmax", "none")
INPUT_MAPS = ("auto", "none")
GLOBAL_STEPS = ("auto", "always", "none")
KERNEL_STORAGES = ("auto", "float32", "int16")


@dataclass(frozen=True)
class SODMParams:
    """Every knob of one SODM fit. The ODM settings' defaults are
    :mod:`sodm_spark.core.defaults`' (``ODMClassifier``'s too); the levels' own are set here.
    ``SODMClassifier``'s Params and the training job's flags read both from this class."""

    kernel: str = defaults.KERNEL
    gamma: str | float = defaults.GAMMA  # 'scale', 'auto' or a number, resolved from the rows
    degree: int = defaults.DEGREE
    coef0: float = defaults.COEF0
    kernel_offset: float = defaults.KERNEL_OFFSET  # c in the kernel k + c: a penalized bias
    # every column mapped onto [0, 1] before the kernel ("none": the rows as they are, but
    # dense rbf rows far from the origin moved to their mean, ColumnStats.centring), as
    # LIBSVM's guide advises (Hsu, Chang & Lin, "A practical guide to support vector
    # classification"). Exact ODM, λ = 1e5/1e6: shuttle 0.9818/0.9934 → 0.9968/0.9989 (its
    # columns span 2 to 26,739), Fashion-MNIST, letter and satellite within ±0.1 points.
    # Sparse (CSR) rows are divided by each column's largest magnitude instead (max-abs, as
    # scikit-learn's MaxAbsScaler): subtracting a column's least value would store every zero
    # of a text row. On data whose columns all have 0 as their least value (counts, tf-idf)
    # both maps are the same; on others a sparse and a dense copy of the rows are scaled
    # differently (sodm_spark.core.column_stats)
    scale: str = "minmax"
    # each feature's factor after the min-max scaling (None: 1 for all): one-hot features of
    # a string column are set 1/√2 by the reader (sodm_spark.core.categories), so that two
    # categories lie as far apart as a numeric column's ends; no flag or Param sets it
    feature_weights: tuple[float, ...] | None = None
    # "auto": wide dense rows of the RBF kernel are fitted on their principal components where
    # the rule of sodm_spark.models.input_projection holds (stored in the model); "none": never
    input_map: str = "auto"
    # what SODMClassifier and a job given only some hyperparameters fall back on (a job given
    # none searches γ and λ first); tol is the partitions' violation bound
    # (LocalSolve.violation_tol)
    lam: float = defaults.LAM
    theta: float = defaults.THETA
    v: float = defaults.V
    tol: float = defaults.TOL
    max_iter: int = defaults.MAX_ITER
    p: int = 3
    levels: int | None = None  # None: chosen from the rows (plan.auto_levels)
    # S = 20: 200 strata gave the same accuracy per level on Fashion-MNIST (8 seeds, within
    # one standard error of random partitions; even an oracle stratification ties) and cost
    # 5-8 s more partitioning at 20k-60k rows
    strata: int = 20
    stop_level: int = 0
    partitioner: str = "stratified"
    warm_start: str = "scaled"
    seed: int = 0
    cache_mb: float | None = None  # kernel cache per task; None: what the memory budget allows
    # the dtype of a level's cached kernel matrices (sodm_spark.spark.sodm.plan.level_storage):
    # "auto" int16 fixed point (half float32's memory, solvers.kernel_rows.FIXED_POINT) where
    # the kernel's diagonal bounds its values, else float32; "float32" or "int16" always
    kernel_storage: str = "auto"
    landmark_candidates: int = LANDMARK_CANDIDATES  # per stratum, Eqn 8 (docs/design.md §2.1)
    label_strata: bool = False  # stratified: split each landmark stratum by class too
    memory_mb: float | None = None  # per task; None: the executor's memory / running tasks
    # automatic stopping (sodm_spark.selection.stopping): a validation slice scored after every
    # level
    auto_stop: bool = True
    # 10% of the rows, at most 10,000 (sodm_spark.selection.stopping.validation_share)
    validation_fraction: float = 0.1
    validation_max_rows: int = 10_000
    min_improvement: float = 0.002
    time_budget: float | None = None
    confidence: float = 1.0  # standard errors of the stop rule's paired comparisons
    # what the stop rule, the level kept, the search and the global step judge by on the
    # validation slice: accuracy, auc, logloss, f1 or balanced_accuracy
    # (sodm_spark.selection.metrics); min_improvement is in its units
    metric: str = "accuracy"
    # the global step after the levels (sodm_spark.spark.sodm.global_step): "auto" where the
    # chosen level is near the majority class or the last merge gained nothing, "always",
    # "none"; a Nyström ODM of every training row on this many centres (None: the most its
    # plan fits in the step's time budget, sodm_spark.spark.sodm.global_plan)
    global_step: str = "auto"
    global_centres: int | None = None
    # class probabilities fitted on the validation slice and saved with the model
    # (sodm_spark.models.calibration): "sigmoid" (Platt), "isotonic" or "none"
    calibration: str = defaults.CALIBRATION
    # each class's rows weighted in every dual and in the validation scores: None, "balanced"
    # (n / (C·n_c): each class the same total weight) or (label, weight) pairs
    # (sodm_spark.core.weights; a dict or "label:weight,..." text is accepted and stored so)
    class_weight: ClassWeight = defaults.CLASS_WEIGHT
    # where each partition's local solve runs (sodm_spark.core.array_namespace): "auto" a GPU
    # the task sees, else the CPU's numba solvers; "cpu" the device path on numpy; "gpu" a
    # GPU, refused before any data are read where none can be had (sodm_spark.spark.gpu)
    device: str = defaults.DEVICE

    # The parts the fit reads, built from the fields above once, each validating its own
    # settings as it is built: what every partition's solve reads (its kernel cache is set per
    # level, dataclasses.replace), how the rows are dealt, and when the levels stop.
    local_solve: LocalSolve = field(init=False, repr=False, compare=False)
    partitioning: Partitioning = field(init=False, repr=False, compare=False)
    stop_rule: StopRule = field(init=False, repr=False, compare=False)

    @refused_as_settings()  # the pure checks it calls (LocalSolve's, Kernel's) too
    def __post_init__(self):
        """Refuse a bad setting, naming it (once, as the parameters are built: every
        SODMParams is valid, so no later step checks them again)."""
        object.__setattr__(self, "device", check_device(self.device))
        parts = {"local_solve": LocalSolve(self.lam, self.theta, self.v, violation_tol=self.tol,
                                           max_iter=self.max_iter, device=self.device),
                 "partitioning": Partitioning(self.partitioner, self.strata, self.seed,
                                              self.landmark_candidates, self.label_strata),
                 "stop_rule": StopRule(self.min_improvement, self.time_budget, self.confidence,
                                      self.metric)}
        for name, part in parts.items():
            object.__setattr__(self, name, part)
        object.__setattr__(self, "class_weight", canonical_class_weight(self.class_weight))
        if int(self.p) != self.p or self.p < 2:
            raise SettingsError(f"p (partitions merged per level) must be an integer >= 2, got "
                                f"{self.p!r}.")
        if self.levels is not None and (int(self.levels) != self.levels or self.levels < 0):
            raise SettingsError(f"levels must be an integer >= 0, or None ('auto': chosen from "
                                f"the rows), got {self.levels!r}.")
        if int(self.stop_level) != self.stop_level or self.stop_level < 0 or (
                self.levels is not None and self.stop_level > self.levels):
            raise SettingsError(f"stop_level must lie in [0, levels={self.levels}], got "
                                f"{self.stop_level!r}.")
        if self.memory_mb is not None and not 0.0 < self.memory_mb < math.inf:
            raise SettingsError(f"memory_mb (--memory-mb) must be a positive number of MB, got "
                                f"{self.memory_mb!r}.")
        if self.cache_mb is not None and not 0.0 <= self.cache_mb < math.inf:
            raise SettingsError(f"cache_mb (--cache-mb) must be a number of MB >= 0, got "
                                f"{self.cache_mb!r}.")
        if self.scale not in SCALINGS:
            raise SettingsError(f"scale must be one of {', '.join(SCALINGS)}, got {self.scale!r}.")
        if self.feature_weights is not None:
            weights = tuple(float(w) for w in self.feature_weights)
            if not weights or not all(0 < w < float("inf") for w in weights):
                raise SettingsError("feature_weights must be positive finite numbers, one a "
                                    f"feature, got {self.feature_weights!r}.")
            object.__setattr__(self, "feature_weights", weights)
        if self.input_map not in INPUT_MAPS:
            raise SettingsError(f"input_map must be one of {', '.join(INPUT_MAPS)}, got "
                                f"{self.input_map!r}.")
        if self.warm_start not in WARM_STARTS:
            raise SettingsError(f"warm_start must be one of {', '.join(WARM_STARTS)}, got "
                                f"{self.warm_start!r}.")
        # names the known kernels, checks the offset (γ is resolved from the rows later)
        Kernel.create(self.kernel, 1.0, self.degree, self.coef0, offset=self.kernel_offset)
        if not 0.0 < self.validation_fraction < 1.0:
            raise SettingsError(f"validation_fraction must lie in (0, 1), got "
                                f"{self.validation_fraction!r}.")
        check_positive_int(self.validation_max_rows, "validation_max_rows")
        if self.kernel_storage not in KERNEL_STORAGES:
            raise SettingsError(f"kernel_storage must be one of {', '.join(KERNEL_STORAGES)}, got "
                                f"{self.kernel_storage!r}.")
        if self.global_step not in GLOBAL_STEPS:
            raise SettingsError(f"global_step must be one of {', '.join(GLOBAL_STEPS)}, got "
                                f"{self.global_step!r}.")
        if self.global_centres is not None:
            check_positive_int(self.global_centres, "global_centres")
        if self.calibration not in CALIBRATIONS:
            raise SettingsError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got "
                                f"{self.calibration!r}.")

    def settings(self) -> dict:
        """The fields a user sets (not the parts built from them), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}


@dataclass
class LevelStats(StatsRecord):
    """One solved level: what the job prints and writes to the metrics JSON."""

    level: int
    partitions: int
    seconds: float
    objective: float
    n_sv: int
    sweeps_max: int
    sweeps_total: int
    rows: int
    warm_start_violation: float
    kernel: str = ""  # 'cached', 'blocked' (on-demand kernel blocks) or both
    storage: str = ""  # dtype of the kernel values the partitions kept ('int16': fixed point)
    elapsed: float = 0.0  # since the fit started, partitioning included, test scoring excluded
    # seconds the command ran before the fit started (start-up, reading; 0 outside a command),
    # which the stop rule's cheap-level test adds to `elapsed` (selection.stopping
    # .seconds_before_fit); None in a record made before it (replayed on `elapsed` alone)
    before_fit_seconds: float | None = None
    max_rows: int = 0  # rows of the largest partition
    memory_mb: float | None = None  # budget of one task at this level
    predicted_seconds: float | None = None  # announced before the level ran
    tasks: int | None = None  # partitions solved at once
    # task seconds scoring the validation (and test) rows inside the level, part of `seconds`
    # once divided by the tasks that ran at once
    scoring_seconds: float | None = None
    validation_accuracy: float | None = None
    # positions of the validation rows this level's model gets wrong: the stop rule compares
    # levels row by row (sodm_spark.selection.stopping.paired_gain), also after a resume
    validation_wrong: list | None = None
    # with another metric than accuracy (SODMParams.metric): its value on the slice, and the
    # level's decision values there, which the stop rule judges it by, also after a resume
    validation_auc: float | None = None
    validation_logloss: float | None = None
    validation_f1: float | None = None
    validation_balanced_accuracy: float | None = None
    # accuracy over weighted rows (class weights, a weight column), which the rule then judges
    validation_weighted_accuracy: float | None = None
    validation_decisions: list | None = None
    test_accuracy: float | None = None
    # the chosen level's only: the points of the model written from it (its support vectors,
    # or a compression's points; docs/design.md §6, step 8); None for the global step's model
    written_points: int | None = None


@dataclass
class LevelPlan:
    """The next level, announced before it runs: its shape, kernel mode and predicted cost."""

    level: int
    partitions: int
    rows: int  # rows of its largest partition
    kernel: str  # 'cached' or 'blocked'
    memory_mb: float  # budget of one task
    cache_mb: float  # kernel cache of one task
    predicted_seconds: float | None
    estimated: bool = False  # predicted from the GEMM speed, before any level was measured
    advice: str = ""  # what a blocked level costs, and the level count that would be cached
    tasks: int | None = None  # solves at once (fewer than the cores when that keeps it cached)
    storage: str = "float32"  # dtype of the cached kernel matrices ('int16': fixed point)
    # the visits of a row an estimate took from the search's chosen point (plan.searched_visits);
    # None: the prior's (plan.PRIOR_ACTIVE_SWEEPS) or a measured level's
    searched_visits: float | None = None


@dataclass
class SODMFit:
    model: KernelExpansion
    levels: list = field(default_factory=list)
    train_seconds: float = 0.0
    partition_seconds: float = 0.0
    n_rows: int = 0
    stopped_at: int | None = None  # the last level solved
    stop_reason: str = ""
    best_level: int | None = None  # the level whose model was returned
    validation_rows: int = 0
    test_accuracy: float | None = None  # of ``model`` (compressed or not) on the test rows
    compression: dict | None = None  # max_sv, method, support vectors and accuracies before/after
    # the input map's rule: features, components, variance kept and kernel agreement, or the
    # reason the rows kept their features (sodm_spark.models.input_projection); None: not tried
    input_map: dict | None = None
    # the global step's plan, Newton steps, validation and test accuracy and whether the model
    # is its (``kept``), or why it did not run; None: not tried (sodm_spark.spark.sodm.global_step)
    global_step: dict | None = None
    # one weight per class in coded order (-1, +1 or the class numbers), None: unweighted
    class_weights: tuple | None = None
