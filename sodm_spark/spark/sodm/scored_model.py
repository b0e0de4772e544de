"""The model a SODM fit returns, scored on the test rows and calibrated on the validation slice
(docs/design.md §6, steps 7-8; §7, "Probabilities").

:func:`~.fit.fit_sodm` ends with a :class:`FinalModel`: the global step's model, or the chosen
level's, collected whole or compressed (:mod:`.written_model`). :func:`scored_on_test` scores it
on the test rows (the level's own scores on the way, where its tasks or the driver have them,
for a compression's "before"), :func:`calibrated` fits its class probabilities on its scores on
the slice, and :func:`taking_projected_rows` puts the fit's input map ahead of it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ...core.labels import accuracy_of_scores, raw_labels
from ...models.calibration import fit_calibration
from ...models.compression import ScoreComparison, compare_scores
from ...models.expansion import KernelExpansion
from .level_model import level_scores
from .written_model import CompressionReport

if TYPE_CHECKING:
    from .fit import ChosenLevel
    from .levels import LevelRun
    from .prepare import PreparedData


#: With a compressed model, the uncompressed one is scored on the test rows too (the report's
#: "before") when that costs at most this many kernel multiply-adds (test rows × support
#: vectors × features: a few seconds here); beyond, only with ``test_every_level``.
CHEAP_SCORING_WORK = 1e12


@dataclass
class FinalModel:
    """The model the fit returns before it is scored and calibrated: the global step's, or the
    chosen level's (compressed or not)."""

    model: KernelExpansion
    compression: CompressionReport | None
    global_report: dict | None  # the global step's report with its model; None: not tried
    from_global_step: bool

    @property
    def compressed(self) -> bool:
        """Whether the model is a compression of the level's (not the level's whole model,
        nor the global step's)."""
        return self.compression is not None and self.compression.compressed


def scored_on_test(sc, run: LevelRun, final: FinalModel, chosen: ChosenLevel,
                   prepared: PreparedData) -> float | None:
    """The model's accuracy on the test rows, or None without them. On the way: the chosen
    level's own (``chosen.entry.test_accuracy``, a compression's "before") where it is scored,
    and the global step's where it ran."""
    if prepared.test_pair is None:
        return None
    classes = prepared.classes
    X_test, y_test = prepared.test_pair[0], raw_labels(prepared.test_pair[1], classes)
    global_scores = _global_step_test_scores(final, X_test, y_test, classes)
    level_test = _level_test_scores(sc, run, final, chosen, X_test)
    if level_test is not None:  # the chosen level's own model
        chosen.entry.test_accuracy = accuracy_of_scores(level_test, y_test, classes)
    if final.from_global_step:
        scores = global_scores
    else:
        scores = final.model.input_scores(X_test) if final.compressed else level_test
    accuracy = accuracy_of_scores(scores, y_test, classes)
    if final.compression is not None and final.compressed:
        final.compression.test = compare_scores(level_test, scores, y_test, classes) \
            if level_test is not None else ScoreComparison(accuracy_after=accuracy,
                                                           rows=len(y_test))
    return accuracy


def _global_step_test_scores(final: FinalModel, X_test, y_test, classes):
    """The global step's f on the test rows where it ran (its report records the accuracy),
    kept or not; else None."""
    report = final.global_report
    if report is None or not report["ran"]:
        return None
    scores = report["model"].input_scores(X_test)
    report["test_accuracy"] = accuracy_of_scores(scores, y_test, classes)
    return scores


def _level_test_scores(sc, run: LevelRun, final: FinalModel, chosen: ChosenLevel, X_test):
    """The chosen level's own f on the test rows, or None: the model is the global step's
    (the level keeps what its tasks scored), or the model is a compression and scoring the
    level would cost more than :data:`CHEAP_SCORING_WORK`."""
    if final.from_global_step:
        return None
    if chosen.scores is not None and run.scoring.test_labels is not None:
        return chosen.scores[run.scoring.n_validation:]  # scored in the level's tasks
    if not final.compressed:
        # the model written is the level itself, on the driver already: scored here with
        # every core (10,000 rows against 27,467 support vectors of 784 features: 26.5 s as
        # a job over level 1's three partitions, 10.4 s here)
        return final.model.input_scores(X_test)
    if X_test.shape[0] * chosen.entry.n_sv * run.width <= CHEAP_SCORING_WORK:
        return level_scores(sc, chosen.solved, X_test, run.kernel, "score the test set")
    return None


def calibrated(final: FinalModel, chosen: ChosenLevel, run: LevelRun,
                prepared: PreparedData) -> KernelExpansion:
    """The model with ``params.calibration``'s class probabilities fitted on its own scores on
    the validation slice (docs/design.md §7, "Probabilities"); a compression's report then
    compares it with the level there. No slice: the model as it is."""
    n_validation = run.scoring.n_validation
    if not n_validation:
        return final.model
    classes = prepared.classes
    assert prepared.validation_pair is not None  # the slice the validation scores are of
    y_validation = raw_labels(prepared.validation_pair[1], classes)
    level_scores_there = None if chosen.scores is None else chosen.scores[:n_validation]
    if final.compressed and final.compression is not None and \
            final.compression.validation_scores is not None:
        own = final.compression.validation_scores  # scored when the compression was judged
    elif final.from_global_step or final.compressed or level_scores_there is None:
        own = final.model.input_scores(prepared.validation_pair[0])
    else:  # the model is the level itself, whose tasks scored these rows
        own = level_scores_there
    model = replace(final.model, calibration=fit_calibration(
        run.params.calibration, own, np.searchsorted(classes, y_validation), len(classes)))
    if final.compressed and final.compression is not None and level_scores_there is not None:
        final.compression.validation = compare_scores(level_scores_there, own, y_validation,
                                                      classes)
    return model


def taking_projected_rows(model: KernelExpansion, projection) -> KernelExpansion:
    """The model with the fit's input map (docs/design.md §2.8) ahead of any projection of its
    own (a compression's): it was scored above on mapped rows, and takes raw ones."""
    if projection is None:
        return model
    if model.projection_components is not None:  # the compression projected them again
        projection = projection.followed_by(model.projection_center,
                                            model.projection_components)
    return replace(model, projection_center=projection.center,
                   projection_components=projection.components)
