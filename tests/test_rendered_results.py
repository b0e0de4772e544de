"""The figures of the guides are the records' (benchmarks/render_results.py): each rendered
region equals what its records render to, a figure edited by hand inside a region is caught,
and so is a measured figure typed outside every region and historical block. Reads files and
records only (no Spark)."""
import shutil
import sys
from pathlib import Path

import pytest

from sodm_spark.benchmarking import figures
from sodm_spark.core.errors import SettingsError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import render_results  # noqa: E402


@pytest.fixture
def copy_of_the_guides(tmp_path, monkeypatch):
    """The guides and docs/ (records, templates) copied, and the render script pointed there."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.setattr(render_results, "ROOT", tmp_path)
    return tmp_path


@pytest.mark.parametrize("region", sorted(render_results.regions()))
def test_every_rendered_region_is_its_records(region):
    entry = render_results.regions()[region]
    for record in entry.records:
        assert (ROOT / record).is_file(), f"{region}: its record {record} is missing"
    assert render_results.region_text(ROOT / entry.file, region) == render_results.rendered(region), \
        f"{entry.file}: {region} differs from {entry.records}; run benchmarks/render_results.py"


def test_the_render_script_reports_no_diff_and_no_stray_figure_on_the_repository(capsys):
    assert render_results.main(["--check"]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("region", ["at-scale-fashion-600000", "stopping", "where-sodm-wins"])
def test_a_figure_edited_by_hand_inside_a_region_is_caught(region, copy_of_the_guides, capsys):
    file = render_results.regions()[region].file
    assert render_results.main(["--check"]) == 0  # the copy as rendered
    text = (copy_of_the_guides / file).read_text()
    # one digit of the region's first accuracy changed, as a hand edit would
    start = text.index(f"<!-- {region}:start -->")
    position = start + text[start:].index(" 0.") + 3
    edited = text[:position] + ("1" if text[position] != "1" else "2") + text[position + 1:]
    (copy_of_the_guides / file).write_text(edited)
    assert render_results.main(["--check"]) == 1
    assert f"{file}: {region}" in capsys.readouterr().out


def test_a_figure_typed_outside_every_region_is_caught(copy_of_the_guides, capsys):
    readme = copy_of_the_guides / "README.md"
    lines = readme.read_text().split("\n")
    at = lines.index("## When the job stops merging") + 1
    lines.insert(at, "XGBoost refitted in 14.2 s to 0.9812, 1.3× the job, 0.07 points up.")
    readme.write_text("\n".join(lines))
    assert render_results.main(["--check"]) == 1
    out = capsys.readouterr().out
    for figure in ("14.2 s", "0.9812", "1.3×", "0.07 points"):
        assert f"README.md: line {at + 1}: {figure!r}" in out, out


def test_a_guide_without_a_regions_markers_fails_with_one_line(copy_of_the_guides, capsys):
    readme = copy_of_the_guides / "README.md"
    readme.write_text(readme.read_text().replace("<!-- stopping-summary:end -->\n", ""))
    assert render_results.main(["--check"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "<!-- stopping-summary:end -->" in out, out


def test_a_figure_moved_into_a_historical_block_is_allowed_only_with_its_opening():
    rendered = ["results"]
    opening = ("**Historical**: one run of 2026-11-26 on the 2-core machine; no result record "
               "is kept, and these figures are not current.")
    block = "<!-- historical:start -->\n{}\n\nSODM scored 0.9782 in 331.5 s.\n<!-- historical:end -->"
    assert figures.stray_figures(block.format(opening), rendered) == ([], [])
    found, problems = figures.stray_figures(block.format("Runs of 2026-11-26."), rendered)
    assert found == [] and len(problems) == 1 and "no result record" in problems[0]
    # a block of an unknown name exempts nothing, and says so
    found, problems = figures.stray_figures(
        "<!-- typed:start -->\nSODM scored 0.9782.\n<!-- typed:end -->", rendered)
    assert [f.figure for f in found] == ["0.9782"] and "typed is no rendered region" in problems[0]
    _, problems = figures.stray_figures("<!-- historical:start -->\n" + opening, rendered)
    assert problems == ["line 1: historical is never closed"]


def test_what_counts_as_a_measured_figure():
    text = "\n".join([
        "# Results of 2026-11-28 with 0.9785 in a heading",
        "The job (`--rows 600000 --min-improvement 0.002`) on 2 cores, 23.6 GiB, ODM λ = 1e6,",
        "θ = 0.1, C = 0.01, Eqns 7-8, 600,000 × 784 rows, γ = 2 × scale, 8,000 points, 12",
        "points of the search, 95% of the variance, flights 15 minutes late, 10^5 to 10^7 rows,",
        "[a link](benchmarks.md#results-0.9785-in-1.5-s), entries within 1.5e-5.",
        "```bash",
        "python bench.py --seconds 0.9785 --ratio 1.5×",
        "```",
        "<!-- 0.9785 in 3 s -->",
        "Measured: 0.9785 and 0.97, in 328.1 s (8-13 s; 15 seconds), 1.77× and 36× the fit,",
        "0.20 points and 0.2-0.35 points better; | 0.0768 | 0.110 |",
    ])
    found, problems = figures.stray_figures(text, [])
    assert problems == []
    assert [(f.line, f.figure) for f in found] == [
        (10, "0.9785"), (10, "0.97"), (10, "328.1 s"), (10, "8-13 s"), (10, "15 seconds"),
        (10, "1.77×"), (10, "36×"), (11, "0.20 points"), (11, "0.2-0.35 points"),
        (11, "0.0768"), (11, "0.110")]


def test_a_template_names_only_figures_it_is_given():
    assert figures.fill("{{a}} in {{ b }} s", {"a": "0.97", "b": "3.5"}) == "0.97 in 3.5 s"
    with pytest.raises(SettingsError, match="missing-one"):
        figures.fill("{{a}} and {{missing-one}}", {"a": "1"})


def test_reflow_keeps_tables_code_spans_units_and_list_openers_whole():
    text = ("* a list item " + "word " * 17 + "`--stop-confidence 2` in 8-13 s with Nyström "
            "+ LinearSVC\n\n| a | b |\n| --- | --- |\n")
    for width in range(30, 100):
        flowed = figures.reflow(text, width)
        assert "| a | b |\n| --- | --- |\n" in flowed
        assert "`--stop-confidence 2`" in flowed and "8-13 s" in flowed
        assert not any(line.lstrip().startswith("+ ") for line in flowed.split("\n"))
        assert " ".join(flowed.split()) == " ".join(text.split())
