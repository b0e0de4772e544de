"""The rows of a fit's metrics JSON: SODM's per-level records (:class:`.sodm.params.LevelStats`)
and DSVRG's per-epoch ones (:class:`.dsvrg.fit.EpochStats`) are both :class:`StatsRecord`."""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, ClassVar


class StatsRecord:
    """A dataclass row of the metrics JSON (fields left at None are omitted)."""

    if TYPE_CHECKING:  # each subclass is a dataclass, what asdict takes
        __dataclass_fields__: ClassVar[dict[str, Any]]

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}
