"""The rows of a fit's metrics JSON: SODM's per-level records (:class:`.sodm.params.LevelStats`)
and DSVRG's per-epoch ones (:class:`.dsvrg.fit.EpochStats`) are both :class:`StatsRecord`."""
from __future__ import annotations

from dataclasses import asdict


class StatsRecord:
    """A dataclass row of the metrics JSON (fields left at None are omitted)."""

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}
