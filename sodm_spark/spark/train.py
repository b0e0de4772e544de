"""One way into a fit on Spark: the checks before it, DSVRG or the SODM levels chosen by the
kernel, a grid search first when one is asked for, then the fit (docs/design.md §6).

``jobs/train_sodm.py``, :class:`~sodm_spark.estimators.ml.SODMClassifier` and the benchmark's
Spark methods all fit through :func:`train`, with parameters built from their own settings by
:func:`fit_params` (a job's flags as ``vars(args)``, an estimator's Params in snake_case, a
benchmark's settings), so a setting means the same on every path. The linear kernel runs DSVRG
on the primal (SODM paper, Algorithm 2; :mod:`.dsvrg.fit`), every other kernel the levels of
Algorithm 1 (:mod:`.sodm.fit`), after a search of :mod:`.tune` if asked. What is refused before
the fit is settled here once, for every caller: a GPU asked for where none can be had
(:func:`check_request`), then one checking pass over the rows and what it decides
(:func:`check_rows`: the label values the fit takes, the level count, the levels the rows allow,
the memory and disk the top level needs). Callers print or record progress through
:class:`Progress`; nothing here prints.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Mapping

import numpy as np

from ..core.errors import InputError, SettingsError
from ..core.timeline import Timeline, add_stage, timed
from ..core.validation import check_two_classes, shown_classes
from ..core.weights import estimator_weights
from ..selection.tuning import (DEFAULT_SEARCH_GRID_TEXT, DEFAULT_SEARCH_POINT,
                                SEARCH_PARTITION_ROWS, GridPoint, ParamGrid, search_pieces,
                                search_sample)
from .dsvrg.fit import DSVRGFit, DSVRGParams
from .dsvrg.holdout import fit_calibrated
from .engine import Engine
from .gpu import check_gpu_request
from .memory import check_fit_resources, executor_memory
from .sodm.fit import FitOptions, fit_sodm
from .sodm.global_only import default_point, levels_skipped
from .sodm.params import SODMFit, SODMParams
from .sodm.plan import auto_level_count, check_levels_fit_rows
from .sodm.prepare import checked_classes, prepare_sodm
from .tune import TuneResult, final_round, tune_sodm

# The settings only the linear path (DSVRG) reads, and the DSVRGParams field each sets; λ, θ,
# v, the strata and the seed are read as the levels read them.
LINEAR_SETTINGS = {"epochs": "epochs", "epoch_tol": "relative_change_tol", "step": "step",
                   "partitions": "n_partitions", "fit_intercept": "fit_intercept"}
_SODM_FIELDS = frozenset(f.name for f in fields(SODMParams) if f.init)


def sodm_params(settings: Mapping) -> SODMParams:
    """SODMParams from user-facing settings, validated as they are built: every key naming a
    field sets it (None keeps the field's default, so an unset flag or Param means the
    default); other keys are not read."""
    return SODMParams(**{name: value for name, value in settings.items()
                         if name in _SODM_FIELDS and value is not None})


def fit_params(settings: Mapping) -> SODMParams | DSVRGParams:
    """What :func:`train` fits for ``settings``: with kernel 'linear' DSVRGParams, whose λ, θ,
    v, strata and seed are read as :func:`sodm_params` reads them (so their defaults are
    SODMParams') and the rest from :data:`LINEAR_SETTINGS` (absent or None: DSVRGParams'
    defaults); with any other kernel, :func:`sodm_params`. The kernel solves' violation bound
    and sweeps (``tol``, ``max_iter``) are not read on the linear path, so not checked there."""
    if settings.get("kernel") == "linear":
        settings = {name: value for name, value in settings.items()
                    if name not in ("tol", "max_iter")}
    params = sodm_params(settings)
    if params.kernel != "linear":
        return params
    return DSVRGParams(lam=params.lam, theta=params.theta, v=params.v, strata=params.strata,
                       seed=params.seed, class_weight=params.class_weight,
                       calibration=params.calibration,
                       validation_fraction=params.validation_fraction,
                       validation_max_rows=params.validation_max_rows, device=params.device,
                       **{name: settings[key] for key, name
                                            in LINEAR_SETTINGS.items()
                                            if settings.get(key) is not None})


def check_classes(classes, linear: bool, refuse: Callable | None = None) -> np.ndarray:
    """``classes`` if a fit takes them: exactly two for DSVRG (``linear``: a binary
    classifier), at least two for the levels (one-vs-rest ODMs beyond two). Otherwise
    ``refuse(classes)`` raises the caller's ValueError in its own words (a job's flags, an
    estimator's Params); without it the error names the parameters."""
    classes = np.asarray(classes)
    if classes.size == 2 or (classes.size > 2 and not linear):
        return classes
    if refuse is not None:
        refuse(classes)
    if linear:
        check_two_classes(classes, "fit (kernel='linear')", "DSVRG",
                          more="use a nonlinear kernel: its levels fit every class at once")
    count = f"{classes.size} class{'es' if classes.size != 1 else ''}"
    raise InputError(f"the labels hold {count} ({shown_classes(classes)}); SODM needs at least "
                     "two. Check that the label column is the right one.")


@dataclass(frozen=True)
class Checked:
    """What :func:`check_rows` found: the parameters to fit (the level count resolved from the
    rows), the label values, and the rows' count and memory width (float64 columns; a float for
    sparse rows, :func:`~sodm_spark.spark.memory.rows_text`)."""

    params: SODMParams | DSVRGParams
    classes: np.ndarray
    n_rows: int
    row_width: int | float


def check_request(sc: Engine, params: SODMParams | DSVRGParams) -> None:
    """What is refused before any row is read: ``device="gpu"`` where neither the driver sees a
    GPU nor the conf asks for executor GPUs (the levels'; DSVRG runs on the CPU whatever it
    says)."""
    if not isinstance(params, DSVRGParams):
        check_gpu_request(sc, params.device)


def check_rows(sc: Engine, blocks, n_features: int, params: SODMParams | DSVRGParams, classes=None, *,
               where: str | None = None, refuse_classes: Callable | None = None,
               dense_itemsize: int = 8) -> Checked:
    """The checks of ``blocks`` before a fit of ``params``, made once whoever fits (the job,
    SODMClassifier, the benchmark): one checking pass (a NaN, infinite or huge value named
    after ``where``, e.g. the job's ``--data PATH``; the label values, the rows' count and
    width), the label values the fit takes (:func:`check_classes`, ``refuse_classes`` giving
    the caller's words; ``classes``: the values when the caller knows them, else the pass's),
    and for the levels: the level count (``levels=None``: from the rows, their width and the
    memory a task may use, :func:`~.sodm.plan.auto_level_count`), the levels the rows allow,
    and the memory and local disk the top level's partitions need
    (:func:`~.memory.check_fit_resources`; ``dense_itemsize``: the bytes of a dense row's
    value, 4 where the caller read float32 rows)."""
    found, stats = checked_classes(blocks, n_features, with_stats=True, where=where)
    linear = isinstance(params, DSVRGParams)
    classes = check_classes(found if classes is None else classes, linear, refuse_classes)
    n_rows, width = stats.n_rows, stats.row_width
    if isinstance(params, DSVRGParams):  # DSVRG checks its partitions against the rows itself
        return Checked(params, classes, n_rows, width)
    memory = executor_memory(sc, params.memory_mb, params.device)
    levels = params.levels
    if levels is None:  # resolved once here: the preparation takes them as given
        levels = auto_level_count(n_rows, params.p, width, memory, params)
        params = replace(params, levels=levels, stop_level=min(params.stop_level, levels))
    else:
        check_levels_fit_rows(n_rows, params.p, levels)
    # a sparse row's width counts float64 columns (a value and its index)
    itemsize = dense_itemsize if isinstance(width, int) else 8
    check_fit_resources(sc, n_rows, width, itemsize, params.p ** levels, levels, memory, params)
    return Checked(params, classes, n_rows, width)


@dataclass(frozen=True)
class Search:
    """A grid search on the top level's partitions before the fit (:mod:`.tune`)."""

    grid: ParamGrid = field(default_factory=ParamGrid)
    sample: bool = True  # a seeded sample of the top level's partitions holding about
    # SEARCH_SAMPLE_ROWS rows (tuning.search_sample), else every partition; either way
    # partitions are searched in pieces of SEARCH_PARTITION_ROWS rows
    default: GridPoint | None = None  # kept unless another point beats it significantly
    then_fit: bool = True  # False: the search alone (the result has no fit)

    @classmethod
    def of_defaults(cls, then_fit: bool = True) -> "Search":
        """The search of a fit given no ODM hyperparameter: γ and λ on a sample of the
        partitions, the default point kept unless beaten (sodm_spark.selection.tuning explains
        why)."""
        return cls(ParamGrid.parse(DEFAULT_SEARCH_GRID_TEXT), default=DEFAULT_SEARCH_POINT,
                   then_fit=then_fit)


@dataclass(frozen=True)
class Progress:
    """What :func:`train` reports as it goes; every callback is optional."""

    on_search: Callable | None = None  # (PreparedData, grid, keys, pieces): before the search;
    # keys are the sampled partitions (None: all of them), pieces the pieces of each
    on_point: Callable | None = None  # (PointResult, index, total): each grid point scored
    on_searched: Callable | None = None  # (TuneResult): the search is done
    on_fit: Callable | None = None  # (params): the fit starts, after any search
    on_plan: Callable | None = None  # (LevelPlan): before each level
    on_level: Callable | None = None  # (LevelStats): each level solved
    on_epoch: Callable | None = None  # (EpochStats): each DSVRG epoch


@dataclass
class Trained:
    """What :func:`train` returns."""

    fit: SODMFit | DSVRGFit | None  # None: the search alone
    params: SODMParams | DSVRGParams  # the fit's: the search's best point, if one ran
    search: TuneResult | None = None
    search_partition_seconds: float = 0.0  # partitioning before the search, if one ran


@dataclass(frozen=True)
class ScoredRows:
    """Rows on the driver that :func:`train` scores, each (X, y) or None: ``test``, scored as
    the fit goes; ``validation``, which the levels' automatic stopping (and a search) score
    and the model's calibration is fitted on, instead of held-out rows (DSVRG's too:
    :mod:`.dsvrg.holdout`)."""

    test: tuple | None = None
    validation: tuple | None = None


def train(sc: Engine, blocks, n_features: int, params: SODMParams | DSVRGParams | Checked,
          classes=None, *, rows: ScoredRows = ScoredRows(), search: Search | None = None,
          progress: Progress = Progress(), refuse_classes: Callable | None = None,
          level_options: FitOptions | None = None) -> Trained:
    """Fit ``params`` (from :func:`fit_params`) on ``blocks``, an RDD of (X, y, row_ids) with
    ``n_features`` columns: DSVRG for DSVRGParams, else the levels of :func:`.sodm.fit.fit_sodm`.

    The checks before the fit are :func:`check_request` and :func:`check_rows` (``classes``:
    the label values when the caller knows them; ``refuse_classes``: its words for values the
    fit cannot take), or ``params`` is the :class:`Checked` a caller got from them itself (the
    job: before it reads its test rows). ``rows``: the test and validation rows on the driver
    (:class:`ScoredRows`). ``search`` scores a grid first and fits its best point
    (``search.then_fit`` False: the search alone).
    ``level_options``: fit_sodm's :class:`~.sodm.fit.FitOptions` (``checkpoint_dir``,
    ``resume``, ``max_sv``, ``compress_method``, ``test_every_level``; its callbacks are
    ``progress``'s); DSVRG takes none of them, nor a search, but its ``timeline``
    (:class:`~sodm_spark.core.timeline.Timeline`: the fit's stages, docs/design.md §6; the
    search's as ``search``, DSVRG's as ``partitioning``, ``epochs``, ``calibration``).
    """
    checked = params if isinstance(params, Checked) else None
    params = params.params if isinstance(params, Checked) else params
    linear = isinstance(params, DSVRGParams)
    options = FitOptions() if level_options is None else level_options
    options_given = sorted(f.name for f in fields(options) if f.name != "timeline"
                           and getattr(options, f.name) != getattr(FitOptions(), f.name))
    test, validation = rows.test, rows.validation
    if linear and (search is not None or options_given):
        given = ", ".join(["a search"] * (search is not None) + options_given)
        raise SettingsError(f"kernel='linear' fits DSVRG on the primal, which has no levels: "
                            f"{given} cannot apply (set lam, theta and v, or use a nonlinear "
                            "kernel).")
    if search is not None:  # a bad grid is refused before any pass over the data
        assert isinstance(params, SODMParams), "a search on the linear path was refused above"
        search.grid.validate(params.kernel)
    if checked is None:
        check_request(sc, params)
        checked = check_rows(sc, blocks, n_features, params, classes,
                             refuse_classes=refuse_classes)
    params, classes = checked.params, checked.classes
    if isinstance(params, DSVRGParams):  # check_rows keeps the kind of params it was given
        _call(progress.on_fit, params)
        return Trained(_fit_dsvrg(sc, blocks, params, classes, n_features, rows,
                                  progress.on_epoch, options.timeline), params)
    prepared = result = None
    if search is not None:
        prepared = prepare_sodm(sc, blocks, params, classes, test, validation, hold_out=True,
                                timeline=options.timeline)
        with timed(options.timeline, "search"):
            result = _search(sc, prepared, params, search, progress)
        params = result.best_params(params)
        if not search.then_fit:
            return Trained(None, params, result, prepared.partition_seconds)
        # the prepared rows' γ is the resolved base ('scale' from the rows); the fit takes the
        # best point's multiple of it
        assert not isinstance(params.gamma, str), "best_params sets γ to a number"
        prepared.kernel = replace(prepared.kernel, gamma=params.gamma)
        # the search found only the majority class: the global step instead of the levels, at
        # the search's default point
        skipped = levels_skipped(prepared, params, result)
        if skipped is not None:
            params = default_point(params, result)
            assert not isinstance(params.gamma, str), "default_point sets γ to a number"
            prepared.kernel = replace(prepared.kernel, gamma=params.gamma)
        options = replace(options, skip_levels=skipped, searched=result.searched_solves())
    _call(progress.on_fit, params)
    fit = fit_sodm(sc, blocks, params, classes, test=test, validation=validation,
                   prepared=prepared, options=replace(options, on_level=progress.on_level,
                                                      on_plan=progress.on_plan))
    return Trained(fit, params, result,
                   0.0 if prepared is None else prepared.partition_seconds)


def _fit_dsvrg(sc: Engine, blocks, params: DSVRGParams, classes, n_features: int, rows: ScoredRows,
               on_epoch: Callable | None, timeline: Timeline | None) -> DSVRGFit:
    """DSVRG (SODM paper, Algorithm 2) calibrated on ``rows.validation``, else on a slice held
    out as the levels hold theirs; with a ``timeline``, its stages: ``partitioning`` (until
    the first epoch: the slice held out, the survey, the layout, the primal set up and its
    first full gradient), ``epochs`` and ``calibration`` (after the last epoch, with what the
    fit left on the executors released)."""
    begun = time.perf_counter()
    epochs: list[float] = []  # (first epoch's start, last epoch's end) as they are reported

    def reported(entry) -> None:
        now = time.perf_counter()
        epochs[:] = [epochs[0] if epochs else now - entry.seconds, now]
        _call(on_epoch, entry)

    fit = fit_calibrated(sc, blocks, params, classes, n_features, rows.validation,
                         test=rows.test, on_epoch=reported)
    if timeline is not None and epochs:
        first, last = epochs
        add_stage(timeline, "partitioning", first - begun, begun)
        add_stage(timeline, "epochs", last - first, first)
        add_stage(timeline, "calibration", time.perf_counter() - last, last)
    return fit


def _search(sc: Engine, prepared, params: SODMParams, search: Search, progress: Progress) -> TuneResult:
    """The grid search on the prepared (partitioned) top level, or on a sample of it."""
    n_parts = prepared.parts.getNumPartitions()
    rows = -(-prepared.n_rows // n_parts)
    keys, pieces = None, max(1, rows // SEARCH_PARTITION_ROWS)  # every row, in pieces
    if search.sample:
        keys = search_sample(n_parts, rows, sc.defaultParallelism, params.seed)
        pieces = search_pieces(len(keys), rows)
    _call(progress.on_search, prepared, search.grid, keys, pieces)
    result = tune_sodm(sc, prepared, params, search.grid, on_point=progress.on_point, keys=keys,
                       default=search.default, max_rows=SEARCH_PARTITION_ROWS, pieces=pieces)
    final_round(sc, prepared, params, result, keys, pieces)  # on the sample only
    _call(progress.on_searched, result)
    return result


def _call(callback, *args) -> None:
    if callback is not None:
        callback(*args)


def fit_in_process(X, y, sample_weight=None, *, cores: int | None = None, test=None,
                   validation=None, progress: Progress = Progress(),
                   level_options: FitOptions | None = None, **settings):
    """SODM's levels (DSVRG with ``kernel="linear"``) on rows in memory, without Spark: the
    job's fit (:func:`train`) on :func:`~.in_process.in_process_context`'s back end. ``settings``
    are the job's and ``SODMClassifier``'s parameters by their snake-case names (``levels``,
    ``gamma``, ``lam``, ``global_step``, ``seed``, ...; :func:`~.train.fit_params`), with the
    same defaults; as the job, a fit given none of γ, λ, θ, v searches them first
    (:meth:`Search.of_defaults`). ``sample_weight``: each row's weight (checked as
    ``ODMClassifier`` checks it; rows of weight 0 are left out); ``test``,
    ``validation``: (X, y) on the driver (:class:`ScoredRows`); ``cores``: the cores the plan
    is made for (all by default); ``progress`` and ``level_options`` as :func:`train` takes
    them (benchmarks/bench_gpu.py prints the job's lines and records the fit's timeline).
    Needs no pyspark (:mod:`.engine`). Returns the :class:`Trained` (its ``fit`` holds the
    model)."""
    from .engine import context_of
    from .io import numpy_to_blocks

    params = fit_params(settings)
    search = None
    if settings.get("kernel") != "linear" and \
            all(settings.get(name) is None for name in ("gamma", "lam", "theta", "v")):
        search = Search.of_defaults()
    sc = context_of(None, cores)  # no session: the in-process back end
    names, types = _frame_columns(X)
    test, validation = (_in_order(rows, names) for rows in (test, validation))
    X = np.asarray(X) if not hasattr(X, "tocsr") else X
    y = np.asarray(y, dtype=np.float64)
    if sample_weight is not None:  # checked as the estimators check it; rows of weight 0 are
        # left out, as the job and SODMClassifier leave them out of their DataFrames
        classes, y_index = np.unique(y, return_inverse=True)
        try:
            sample_weight = estimator_weights(None, classes, y_index, sample_weight)
        except ValueError as error:
            raise InputError(str(error)) from None
        kept = np.flatnonzero(sample_weight)
        if kept.size < y.size:
            X, y, sample_weight = X[kept], y[kept], sample_weight[kept]
    blocks = numpy_to_blocks(sc, X, y, weights=sample_weight)
    trained = train(sc, blocks, X.shape[1], params, search=search,
                    rows=ScoredRows(test=test, validation=validation), progress=progress,
                    level_options=level_options)
    if trained.fit is not None:  # a DataFrame's columns: the model scores by their names
        trained.fit.model = trained.fit.model.with_features(names, types)
    return trained


def _frame_columns(X) -> tuple[list[str] | None, list[str] | None]:
    """(the column names of a pandas DataFrame ``X`` whose names are all strings, their
    dtypes' names), else (None, None): rows without names."""
    from ..core.feature_names import named_columns

    names = named_columns(X)
    if names is None:
        return None, None
    return names, [str(getattr(kind, "name", kind)) for kind in X.dtypes]


def _in_order(rows, names):
    """Test or validation rows ``(X, y)`` with a DataFrame's columns taken by ``names`` (the
    training frame's; :mod:`sodm_spark.core.feature_names`), as NumPy rows; others as given."""
    if rows is None or names is None or _frame_columns(rows[0])[0] is None:
        return rows
    from ..core.feature_names import columns_by_name

    X, y = rows
    positions, _ = columns_by_name(names, list(X.columns), "the scored rows")
    return np.asarray(X)[:, positions], y
