"""The documents: the README as a short entry point, every link and every reference to
docs/design.md resolving inside the repository, no issue or paper-file numbers, and the results
regions where the benchmark job writes them. Reads text files only (no Spark, no imports of the
package).
"""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DESIGN = DOCS / "design.md"
GUIDES = ("jobs.md", "operations.md", "benchmarks.md", "design.md")
# where code and documents may cite the design or the papers
SOURCES = ("sodm_spark", "jobs", "tests", "benchmarks", "docker", "conf", "notebooks", "docs")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".conf", ".properties", ".sh",
                 ".ipynb", ".example", ""}
MARKDOWN = [README, *sorted(DOCS.glob("*.md")), ROOT / "jobs" / "README.md",
            ROOT / "docker" / "README.md", ROOT / "conf" / "README.md"]
# built from pieces, so that this file does not match them itself
ISSUE_NUMBER = re.compile("issue" + r"s? \[\d", re.I)
PAPER_FILE_NUMBER = re.compile("paper" + r" 00\d", re.I)
DESIGN_REFERENCE = re.compile(r"design\.md,? (§[\d.]+(?:-[\d.]+)?(?:, §[\d.]+)*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _text_files():
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path
    yield README


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # no headings in code blocks
    return {_slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def _design_sections() -> set:
    return {match[1] for match in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DESIGN.read_text(),
                                              re.M)}


def test_readme_is_a_short_entry_point_that_links_every_guide():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    for guide in GUIDES:
        assert f"](docs/{guide}" in text, f"the README does not link docs/{guide}"
    for quick_start in ("spark-submit jobs/train_sodm.py", "ODMClassifier(", "SODMClassifier("):
        assert quick_start in text


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_to_files_and_headings(path):
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked here
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.exists(), f"{path.name}: {target} does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{path.name}: no heading #{anchor} in {linked.name}"


def test_every_design_reference_names_a_section_of_docs_design():
    sections = _design_sections()
    assert {"1", "2", "2.1", "2.5", "4", "5", "7", "9"} <= sections
    for path in _text_files():
        for cited in DESIGN_REFERENCE.findall(path.read_text(errors="replace")):
            for number in re.findall(r"\d+(?:\.\d+)?", cited):
                assert number in sections, f"{path.relative_to(ROOT)}: design.md §{number}"


def test_no_issue_numbers_or_paper_file_numbers():
    for path in _text_files():
        text = path.read_text(errors="replace")
        assert not ISSUE_NUMBER.search(text), f"{path.relative_to(ROOT)} cites an issue number"
        assert not PAPER_FILE_NUMBER.search(text), f"{path.relative_to(ROOT)} cites a paper file"


def test_the_papers_are_cited_by_authors_and_title():
    for path in (README, DESIGN):
        text = " ".join(path.read_text().split())
        for entry in ("Scalable Optimal Margin Distribution Machine",
                      "Coreset Stochastic Variance-Reduced Gradient with Application to Optimal "
                      "Margin Distribution Machine",
                      "Core Vector Regression for Very Large Regression Problems",
                      "Small Coresets to Represent Large Training Data for Support Vector Machines"):
            assert entry in text, f"{path.name} lacks {entry!r}"


@pytest.mark.parametrize("region, folder", [("results", "results"),
                                            ("results-multiclass", "results/multiclass"),
                                            ("results-nonlinear", "results/nonlinear")])
def test_results_regions_live_in_docs_benchmarks(region, folder):
    """jobs/benchmark.py --readme docs/benchmarks.md rewrites these regions: each once, and the
    stored command that produced it names that file."""
    text = (DOCS / "benchmarks.md").read_text()
    start, end = f"<!-- {region}:start -->", f"<!-- {region}:end -->"
    assert text.count(start) == 1 and text.count(end) == 1 and text.index(start) < text.index(end)
    assert start not in README.read_text()
    command = json.loads((DOCS / folder / "benchmark.json").read_text())["command"]
    assert "--readme docs/benchmarks.md" in command
    assert command in text
