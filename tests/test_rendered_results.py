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


def test_a_figure_typed_by_hand_is_caught(tmp_path, monkeypatch):
    region = sorted(render_results.REGIONS)[0]
    file = render_results.REGIONS[region][0]
    text = (ROOT / file).read_text()
    start = text.index(f"<!-- {region}:start -->")
    rendered = render_results.rendered(region)
    # change one digit of the first accuracy in the region, as a hand edit would
    inside = text[start:]
    position = start + inside.index("0.")
    digit = text[position + 2]
    edited = text[:position + 2] + ("1" if digit != "1" else "2") + text[position + 3:]
    copy = tmp_path / "guide.md"
    copy.write_text(edited)
    assert render_results.region_text(copy, region) != rendered
    monkeypatch.setattr(render_results, "ROOT", tmp_path)
    monkeypatch.setitem(render_results.REGIONS, region,
                        (copy.name, *render_results.REGIONS[region][1:]))
    for path in {render_results.REGIONS[name][1] for name in render_results.REGIONS}:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    for name in render_results.REGIONS:
        if name != region:
            monkeypatch.delitem(render_results.REGIONS, name)
    assert render_results.main(["--check"]) == 1
