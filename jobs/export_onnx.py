"""jobs/export_onnx.py MODEL OUT.onnx: a saved model as an ONNX file,
sodm_spark/jobs/export_onnx.py (also the console command ``sodm-export-onnx``; docs/jobs.md)."""
import sys

from sodm_spark.core.errors import run_job
from sodm_spark.jobs.export_onnx import main, parse_args  # noqa: F401 - its names

if __name__ == "__main__":
    sys.exit(run_job(main))
