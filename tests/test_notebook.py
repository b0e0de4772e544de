"""notebooks/quickstart.ipynb runs top to bottom in local mode, and is stored without outputs."""
import json
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_quickstart_is_stored_without_outputs():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code and all(not cell["outputs"] and cell["execution_count"] is None for cell in code)


def test_quickstart_runs_in_local_mode(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    # the kernel must be this interpreter, which has sodm_spark installed
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    text = "\n".join(output.get("text", "") for cell in notebook.cells
                     for output in cell.get("outputs", []) if output.get("name") == "stdout")
    assert "level 0: 1 partitions" in text
    accuracy = float(text.split("test accuracy ")[-1].split(",")[0])
    assert accuracy > 0.85
    figures = [output for cell in notebook.cells for output in cell.get("outputs", [])
               if "image/png" in output.get("data", {})]
    assert figures, "the accuracy/time plot was not drawn"
    assert "agrees with the labels on" in text
