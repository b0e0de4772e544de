"""Where the seconds of a whole training command went (pure Python, no Spark; docs/design.md §6).

The levels table says what each level cost, but a command also pays for Python's imports and
the JVM before the first row is read, for the reading, the preparation, the model's collection
and the writing. :class:`Timeline` records a command's stages (each timed with
``time.perf_counter`` only, so the timing costs nothing next to what it times) against the
command's start (:func:`command_started`), refuses stages that overlap, and closes with
``other``: the whole less every stage, whatever was not attributed.
"""
from __future__ import annotations

import math
import os
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable, Iterator

#: The module's import: the command's start where /proc cannot say (not Linux).
_IMPORTED = time.perf_counter()
#: What a spark-submit JVM's command line holds (bin/spark-submit execs it, so the JVM keeps
#: the spark-submit command's process and start; a Python file it runs is its child).
SPARK_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
#: Seconds two stages may share: the clock is read once at a stage's end and once at the next
#: one's start, so adjacent stages touch; float rounding of start + seconds stays far below.
OVERLAP_TOLERANCE = 1e-6


def read_proc_file(path: str) -> str:
    """The text of a /proc file (NUL bytes, as in a cmdline, kept); OSError where absent."""
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def _stat_fields(text: str) -> list[str]:
    """The fields of a /proc/<pid>/stat line from field 3 on (the command name, field 2, is
    in parentheses and may hold spaces: the fields start after the last ')')."""
    return text[text.rindex(")") + 2:].split()


def _started_since_boot(read: Callable[[str], str], pid: str) -> tuple[float, str]:
    """(seconds from boot to the start of process ``pid``, its parent's pid): field 22 of its
    stat, in clock ticks, and field 4."""
    fields = _stat_fields(read(f"/proc/{pid}/stat"))
    return int(fields[19]) / os.sysconf("SC_CLK_TCK"), fields[1]


def _since_boot(read: Callable[[str], str]) -> float:
    """Seconds since boot now: /proc/uptime, on the boot clock a stat's start time counts on
    (hundredths of a second), else /proc/stat's btime (whole seconds of the wall clock) against
    ``time.time()``."""
    try:
        return float(read("/proc/uptime").split()[0])
    except (OSError, ValueError, IndexError):
        lines = read("/proc/stat").splitlines()
        btime = next(int(line.split()[1]) for line in lines if line.startswith("btime"))
        return time.time() - btime


def command_started(read: Callable[[str], str] = read_proc_file) -> float:
    """The start of the command this process runs, as a ``time.perf_counter()`` value: this
    process's start (/proc/self/stat), or its parent's when the parent is a spark-submit JVM
    (its cmdline holds :data:`SPARK_SUBMIT_CLASS`: ``spark-submit file.py`` started the JVM,
    which started this Python driver). Mapped onto perf_counter by the time since boot
    (:func:`_since_boot`); where /proc cannot be read, the import of this module. ``read``
    reads a /proc path (a test gives a fake one)."""
    now = time.perf_counter()
    try:
        started, parent = _started_since_boot(read, "self")
        try:
            parent_command = read(f"/proc/{parent}/cmdline")
        except OSError:  # the parent may be gone, or hidden from this process
            parent_command = ""
        if SPARK_SUBMIT_CLASS in parent_command:
            started = _started_since_boot(read, parent)[0]
        age = _since_boot(read) - started
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED
    return now - max(0.0, age)


@dataclass(frozen=True)
class Stage:
    """One stage of a command: its name, its start (perf_counter) and its seconds."""

    name: str
    started: float
    seconds: float

    @property
    def ended(self) -> float:
        return self.started + self.seconds


class Timeline:
    """A command's stages from ``origin`` (a perf_counter value; :func:`command_started` by
    default) to its end: :meth:`stage` times a block, :meth:`add` takes a stage measured
    elsewhere (a level's seconds from its record). Stages may not overlap (the whole less
    their sum, ``other``, is then never negative); they are kept in the order they ran."""

    def __init__(self, origin: float | None = None):
        self.origin = command_started() if origin is None else float(origin)
        self.stages: list[Stage] = []
        self._ended: float | None = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as the stage ``name`` (recorded when the block ends without an
        error: a failed command prints no timeline)."""
        started = time.perf_counter()
        yield
        self.add(name, time.perf_counter() - started, started)

    def add(self, name: str, seconds: float, started: float | None = None) -> Stage:
        """Record the stage ``name`` of ``seconds``, begun at ``started`` (perf_counter; None:
        it ended now). Refuses negative seconds, a start before the origin and a stage that
        overlaps one recorded (a ValueError naming both)."""
        if not (math.isfinite(seconds) and seconds >= 0.0):
            raise ValueError(f"stage {name!r}: seconds must be a finite number >= 0, got "
                             f"{seconds!r}.")
        started = time.perf_counter() - seconds if started is None else float(started)
        if started < self.origin - OVERLAP_TOLERANCE:
            raise ValueError(f"stage {name!r} starts {self.origin - started:.6f} s before the "
                             "command's start.")
        new = Stage(name, started, float(seconds))
        for old in self.stages:
            if min(old.ended, new.ended) - max(old.started, new.started) > OVERLAP_TOLERANCE:
                raise ValueError(f"stage {name!r} ({self._span(new)}) overlaps stage "
                                 f"{old.name!r} ({self._span(old)}): stages must not overlap.")
        self.stages.append(new)
        self.stages.sort(key=lambda stage: stage.started)
        return new

    def _span(self, stage: Stage) -> str:
        return f"{stage.started - self.origin:.3f} s to {stage.ended - self.origin:.3f} s"

    def end(self) -> float:
        """Close the timeline now (once; later calls keep the first end): the whole seconds."""
        if self._ended is None:
            self._ended = time.perf_counter()
        return self.whole

    @property
    def whole(self) -> float:
        """Seconds from the origin to the end (now, while open), and at least to the end of
        the last stage."""
        end = time.perf_counter() if self._ended is None else self._ended
        return max([end] + [stage.ended for stage in self.stages]) - self.origin

    def to_dict(self) -> dict:
        """{"stages": [{"stage", "start" (seconds from the origin), "seconds"}], "whole",
        "other"} — the metrics JSON's ``timeline``."""
        whole = self.whole
        return {"stages": [{"stage": stage.name, "start": stage.started - self.origin,
                            "seconds": stage.seconds} for stage in self.stages],
                "whole": whole, "other": max(0.0, whole - sum(s.seconds for s in self.stages))}

    def lines(self) -> list[str]:
        """The printed table: each stage's start (s from the origin), seconds and share of the
        whole, then ``other`` and the whole."""
        record = self.to_dict()
        whole = record["whole"]
        width = max([len("stage")] + [len(stage["stage"]) for stage in record["stages"]])

        def share(seconds: float) -> str:
            return f"{100.0 * seconds / whole:6.1f}%" if whole > 0 else f"{'':>7}"

        rows = [f"  {'stage':<{width}} {'start s':>9} {'seconds':>9} {'share':>7}"]
        rows += [f"  {stage['stage']:<{width}} {stage['start']:>9.2f} {stage['seconds']:>9.2f} "
                 f"{share(stage['seconds'])}" for stage in record["stages"]]
        rows.append(f"  {'other':<{width}} {'':>9} {record['other']:>9.2f} "
                    f"{share(record['other'])}")
        rows.append(f"  {'whole':<{width}} {'':>9} {whole:>9.2f} {share(whole)}")
        return rows


def timed(timeline: Timeline | None, name: str) -> AbstractContextManager[None]:
    """``timeline.stage(name)``, or a block timed by nothing when there is no timeline (a fit
    of SODMClassifier, a test, the benchmark)."""
    return nullcontext() if timeline is None else timeline.stage(name)


def add_stage(timeline: Timeline | None, name: str, seconds: float,
              started: float | None = None) -> None:
    """``timeline.add(...)`` where there is a timeline."""
    if timeline is not None:
        timeline.add(name, seconds, started)
