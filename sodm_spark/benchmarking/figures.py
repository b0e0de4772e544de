"""Figures in the guides and the records they come from (``benchmarks/render_results.py``).

* :func:`fill` is the small templating mechanism of the prose regions: a template (Markdown
  under ``docs/results/prose/``) names its figures as ``{{name}}``, and the render script fills
  each from a value computed from a result record (:func:`method_numbers`,
  :func:`comparator_values` here; the at-scale and stopping reports' own), so a sentence can
  quote a record without a figure typed into it; :func:`reflow` wraps the filled lines again.
* :func:`stray_figures` finds the measured figures of a guide that lie outside every rendered
  region and every historical block: what ``tests/test_rendered_results.py`` forbids.

A **measured figure** is a number of running text (not in a fenced code block, an inline code
span, an HTML comment, a link's target or a heading) of one of four forms:

* a fraction below one with two to four decimals, ``0.97`` to ``0.9785``: an accuracy, a share,
  a log-loss;
* a duration: a number (or a range ``a-b``) followed by ``s`` or ``seconds`` (minutes are
  left out: "15 minutes late" defines a label, "within the 15 minutes asked" is a budget);
* a ratio: a number written against ``×``, as ``1.77×`` (a product of sizes is spaced:
  ``600,000 × 784``, ``2 × scale``);
* a margin: a decimal number followed by ``points`` (``0.20 points``; a whole number of points
  is a count of search or compression points, not a margin).

A number right after ``=`` (``θ = 0.1``, ``C = 0.01``) is a setting, not a measurement, and
commands, flags and their values belong in code spans, where no figure is looked for. Dates,
row counts of inputs, hardware (``2 cores``), equation numbers and percentages are not of the
four forms. A historical block opens with ``<!-- historical:start -->`` and a first paragraph that
says in words when (and where) its figures were measured, that they have no result record and
are not current (:data:`HISTORICAL_OPENING`: what it must begin with and say); it closes with
``<!-- historical:end -->``.
"""
from __future__ import annotations

import re
import textwrap
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..core.errors import SettingsError

PLACEHOLDER = re.compile(r"\{\{\s*([\w.-]+)\s*\}\}")
HISTORICAL = "historical"
#: What the first paragraph of a historical block begins with, and what it must say.
HISTORICAL_OPENING = ("**Historical", "no result record")

_NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    r"(?<![\w.,])(?:"
    r"(?P<margin>\d+\.\d+(?:[-–]\d+\.\d+)? points)\b"
    r"|(?P<ratio>\d+(?:\.\d+)?×)"
    rf"|(?P<duration>{_NUMBER}(?:[-–]{_NUMBER})? (?:s|seconds))(?![\w])"
    r"|(?P<fraction>0\.\d{2,4})(?!\d|\.\d)"
    r")")
REGION_MARKER = re.compile(r"<!-- ([\w-]+):(start|end) -->")
# what is no prose: fenced blocks, inline code, HTML comments, link targets (spaces kept, so
# that the columns of a line are the file's)
_NOT_PROSE = (re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M), re.compile(r"`[^`\n]*`"),
              re.compile(r"<!--.*?-->", re.S), re.compile(r"\]\([^)\s]*\)"))


def fill(template: str, values: Mapping[str, str]) -> str:
    """``template`` with every ``{{name}}`` replaced by ``values[name]``; a name with no value
    is a SettingsError that names it (a template must not quote a figure nobody computes)."""
    missing = sorted({name for name in PLACEHOLDER.findall(template) if name not in values})
    if missing:
        raise SettingsError(f"the template names figures with no value: {', '.join(missing)}; "
                            "add them to its values in benchmarks/render_results.py.")
    return PLACEHOLDER.sub(lambda match: values[match[1]], template)


# what a line must not break inside: a code span, a number and its unit of seconds, and the
# space before what would open a list at the start of a line ("+ LinearSVC", "- ", "2. ")
_UNBROKEN = re.compile(r"`[^`]*`|\d s\b| [+*-] | \d+[.)] ")
_GLUE = "\x00"


def reflow(text: str, width: int = 96) -> str:
    """``text``'s paragraphs and list items wrapped again at ``width`` (figures filled into a
    wrapped template leave its lines ragged); tables, headings and fenced blocks as they are."""
    blocks = []
    for block in text.strip("\n").split("\n\n"):
        lines = block.split("\n")
        if any(line.lstrip().startswith(("|", "#", "```", "<!--")) for line in lines):
            blocks.append(block)
            continue
        items: list[list[str]] = []
        for line in lines:
            if line.startswith(("* ", "- ")) or not items:
                items.append([line])
            else:
                items[-1].append(line)
        wrapped = []
        for item in items:
            words = _UNBROKEN.sub(lambda match: match[0].replace(" ", _GLUE),
                                  " ".join(part.strip() for part in item))
            bullet = item[0][:2] if item[0].startswith(("* ", "- ")) else ""
            wrapped.append(textwrap.fill(words[len(bullet):], width, initial_indent=bullet,
                                         subsequent_indent=" " * len(bullet),
                                         break_long_words=False, break_on_hyphens=False))
        blocks.append("\n".join(wrapped).replace(_GLUE, " "))
    return "\n\n".join(blocks) + "\n"


@dataclass(frozen=True)
class StrayFigure:
    """A measured figure outside every rendered region and historical block."""

    line: int
    figure: str
    text: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.figure!r} in {self.text.strip()[:100]!r}"


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match[0])


def prose(text: str) -> str:
    """``text`` with what is not prose blanked out, line for line and column for column."""
    for pattern in _NOT_PROSE:
        text = pattern.sub(_blank, text)
    return "\n".join(" " * len(line) if line.lstrip().startswith("#") else line
                     for line in text.split("\n"))


def exempt_lines(lines: list[str], rendered: Iterable[str]) -> tuple[set[int], list[str]]:
    """The indices of the lines inside a rendered region (one of ``rendered``'s names) or a
    historical block, markers included; and what is wrong with the blocks (an unclosed or
    unknown block, a historical block whose first line does not say what it is)."""
    names = set(rendered) | {HISTORICAL}
    exempt: set[int] = set()
    problems: list[str] = []
    open_block: tuple[str, int] | None = None
    for index, line in enumerate(lines):
        marker = REGION_MARKER.fullmatch(line.strip())
        if marker is not None:
            name, side = marker[1], marker[2]
            if side == "start":
                if open_block is not None:
                    problems.append(f"line {index + 1}: {name} opens inside {open_block[0]}")
                open_block = (name, index)
            elif open_block is None or open_block[0] != name:
                problems.append(f"line {index + 1}: {name} closes no open block")
            else:
                if name in names:
                    exempt.update(range(open_block[1], index + 1))
                else:
                    problems.append(f"line {open_block[1] + 1}: {name} is no rendered region")
                if name == HISTORICAL:
                    problems += _historical_opening(lines, open_block[1], index)
                open_block = None
    if open_block is not None:
        problems.append(f"line {open_block[1] + 1}: {open_block[0]} is never closed")
    return exempt, problems


def _historical_opening(lines: list[str], start: int, end: int) -> list[str]:
    """What is wrong with the opening paragraph of the historical block ``start``-``end``."""
    body = "\n".join(lines[start + 1:end]).strip()
    opening = " ".join(body.split("\n\n")[0].split())
    begins, says = HISTORICAL_OPENING
    if opening.startswith(begins) and says in opening:
        return []
    return [f"line {start + 1}: a historical block opens with a paragraph that begins "
            f"{begins!r} and says {says!r} (when and where its figures were measured)"]


def stray_figures(text: str, rendered: Iterable[str]) -> tuple[list[StrayFigure], list[str]]:
    """The measured figures of ``text`` outside the regions named in ``rendered`` and outside
    historical blocks, and what is wrong with its blocks (:func:`exempt_lines`)."""
    lines = text.split("\n")
    exempt, problems = exempt_lines(lines, rendered)
    found = []
    for index, line in enumerate(prose(text).split("\n")):
        if index in exempt:
            continue
        for match in FIGURE.finditer(line):
            if line[:match.start()].rstrip().endswith("="):
                continue  # a setting: θ = 0.1
            found.append(StrayFigure(index + 1, match[0], lines[index]))
    return found, problems


# --- values of the records, for the templates ------------------------------------------------


def slug(name: str) -> str:
    """A method's name as a template names it: ``Nyström + LinearSVC`` → ``nystrom-linearsvc``."""
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")


def method_numbers(document: dict, prefix: str) -> dict[str, float]:
    """The rows of a benchmark.json (``jobs/benchmark.py``) that finished: for each, its test
    accuracy (``PREFIX.METHOD[-LEVEL].acc``), its fit seconds (``.fit``: from the start of
    the fit) and a SODM level's own seconds (``.level``)."""
    numbers = {}
    for row in document.get("results", []):
        if row.get("status") != "ok":
            continue
        key = f"{prefix}.{slug(row['name'])}" + \
            ("" if row.get("level") is None else f"-{row['level']}")
        numbers[f"{key}.acc"] = row["accuracy"]
        numbers[f"{key}.fit"] = row["fit_seconds"]
        if row.get("level_seconds") is not None:
            numbers[f"{key}.level"] = row["level_seconds"]
    return numbers


def formatted(numbers: Mapping[str, float]) -> dict[str, str]:
    """Accuracies with four decimals, seconds with one."""
    return {key: f"{value:.4f}" if key.endswith(".acc") else f"{value:.1f}"
            for key, value in numbers.items()}


def comparator_values(csvrg: dict, cvr: dict) -> dict[str, str]:
    """The comparators' figures (``bench_csvrg.py``'s and ``bench_cvr.py``'s records)."""
    exact, fast = csvrg["methods"]["exact ODM (DCD)"], csvrg["methods"]["CSVRG+ODM"]
    return {"csvrg-gap": f"{csvrg['accuracy_gap_points']:.2f}",
            "csvrg-core": f"{fast['model_size']:,}",
            "csvrg-accuracy": f"{fast['accuracy']:.4f}", "exact-accuracy": f"{exact['accuracy']:.4f}",
            "csvrg-time-ratio": f"{csvrg['fit_time_ratio']:.2f}",
            "cvr-rows": f"{cvr['cvr']['rows']:,}", "svr-rows": f"{cvr['svr']['rows']:,}",
            "cvr-rmse-ratio": f"{cvr['rmse_ratio']:.3f}",
            "cvr-time-ratio": f"{cvr['time_ratio']:.2f}", "runs": str(csvrg["params"]["repeats"])}
