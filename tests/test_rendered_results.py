"""The at-scale figures of the guides are the records' (benchmarks/render_results.py): each
rendered region equals what its record renders to, and a figure edited by hand is caught."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import render_results  # noqa: E402


@pytest.mark.parametrize("region", sorted(render_results.REGIONS))
def test_every_rendered_region_is_its_records(region):
    file, record, _, _ = render_results.REGIONS[region]
    assert (ROOT / record).is_file(), f"{region}: its record {record} is missing"
    assert render_results.region_text(ROOT / file, region) == render_results.rendered(region), \
        f"{file}: {region} differs from {record}; run benchmarks/render_results.py"


def test_a_figure_typed_by_hand_is_caught(tmp_path, monkeypatch, capsys):
    region = sorted(render_results.REGIONS)[0]
    file = render_results.REGIONS[region][0]
    # a copy of the guides and the records, where one digit of the region's first accuracy
    # is changed as a hand edit would
    records = {entry[1] for entry in render_results.REGIONS.values()}
    for path in [*records, file, render_results.SUMMARY_REGION[0]]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    monkeypatch.setattr(render_results, "ROOT", tmp_path)
    assert render_results.main(["--check"]) == 0  # the copy as rendered
    text = (tmp_path / file).read_text()
    start = text.index(f"<!-- {region}:start -->")
    position = start + text[start:].index("0.") + 2
    edited = text[:position] + ("1" if text[position] != "1" else "2") + text[position + 1:]
    (tmp_path / file).write_text(edited)
    assert render_results.main(["--check"]) == 1
    assert f"{file}: {region}" in capsys.readouterr().out
