"""Export a saved kernel model as an ONNX file, to score rows outside Python.

    sodm-export-onnx models/sodm model.onnx
    python -m sodm_spark.jobs.export_onnx models/sodm model.onnx --input-type float

MODEL is a model directory (the training job's --model-out, KernelExpansion.save; its current
version) or a saved pyspark.ml SODMClassificationModel (the expansion in its `data` folder).
OUT gets the graph of sodm_spark.models.onnx_export: input `features` (raw rows, the batch
dimension symbolic), outputs `label`, `scores` (the decision values) and `probabilities` when
the model is calibrated; onnxruntime runs it from Java, C#, C++ or a browser. No Spark: the job
reads the model's files and writes one file (renamed into place). A failure ends with one
`error: ...` line and its kind's exit code (sodm_spark.core.errors): OUT exists without
--overwrite, cannot be written, or onnx is not installed (2); the model is missing, unreadable
or has no export (5).
"""
from __future__ import annotations

import argparse
import errno
import sys
import time
from pathlib import Path

from sodm_spark.core.errors import SETTINGS, ResourceError, SettingsError, reported, run_job
from sodm_spark.data.filesystems import is_uri, local_path, uri_scheme
from sodm_spark.data.storage import join, replace_file, resolve_version, store_for
from sodm_spark.models.expansion import KernelExpansion
from sodm_spark.models.onnx_export import INPUT_TYPES, import_onnx, to_onnx
from sodm_spark.ops.jobconf import check_output_paths, parse_with_defaults


def parse_args(argv=None, prog="export_onnx.py") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("model", metavar="MODEL",
                        help="model directory (arrays.npz + metadata.json), or a saved "
                        "SODMClassificationModel")
    parser.add_argument("out", metavar="OUT", help="the ONNX file to write (OUT.onnx)")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    parser.add_argument("--input-type", choices=INPUT_TYPES, default="double",
                        help="element type of the `features` input: double (default) or "
                        "float; the graph computes in double either way")
    parser.add_argument("--no-probabilities", dest="probabilities", action="store_false",
                        help="leave the calibration out (labels and scores only)")
    args, args.config = parse_with_defaults(parser, "export_onnx", argv)
    return args


def output_file(out: str, overwrite: bool) -> Path:
    """OUT as a local path, refused (SettingsError) when it is on another store or exists and
    ``overwrite`` is not set."""
    if is_uri(out) and uri_scheme(out) != "file":
        raise SettingsError(f"OUT {out}: the export writes a local file; write it to a local "
                            "path and copy it to the store.")
    path = Path(local_path(out) if is_uri(out) else out)
    if path.exists() and not path.is_dir() and not overwrite:
        raise SettingsError(f"OUT {out} exists; pass --overwrite to replace it, or choose "
                            "another file.")
    return path


def expansion_folder(model: str) -> str:
    """The folder KernelExpansion.load reads: a SODMClassificationModel's ``data`` folder
    (of its current version), else ``model`` itself."""
    store = store_for(model)
    if store.is_dir(model):
        folder = resolve_version(store, model, "metadata")
        if folder is not None and store.exists(join(folder, "data", "metadata.json")):
            return join(folder, "data")
    return model


def write_file(path: Path, data: bytes, out: str) -> None:
    """``data`` as the file ``path``, renamed into place; a failure to write it is a
    SettingsError (a full disk a ResourceError) naming OUT."""
    try:
        replace_file(path, lambda staging: staging.write_bytes(data))
    except OSError as error:
        why = error.strerror or str(error)
        if error.errno == errno.ENOSPC:
            raise ResourceError(f"OUT {out} cannot be written: {why}; free space there or "
                                "choose another disk.") from None
        raise SettingsError(f"OUT {out} cannot be written: {why}; choose a writable "
                            "location.") from None


def main(argv=None, prog="export_onnx.py") -> int:
    """The job; a failure raises sodm_spark.core.errors.JobExit (its one line and exit code)."""
    args = parse_args(argv, prog)
    with reported(value_errors=SETTINGS):
        path = output_file(args.out, args.overwrite)
        check_output_paths({}, {"OUT": str(path)})
        try:
            import_onnx()
        except ImportError as missing:
            raise SettingsError(str(missing)) from None
    started = time.perf_counter()
    with reported():
        model = KernelExpansion.load(expansion_folder(args.model))
    with reported(prefix=f"{args.model}: "):
        exported = to_onnx(model, input_type=args.input_type, probabilities=args.probabilities)
    with reported():
        write_file(path, exported.SerializeToString(), args.out)
    outputs = [output.name for output in exported.graph.output]
    vectors = model.support_vectors.shape[0]
    print(f"wrote {args.out} ({path.stat().st_size / 2**20:,.2f} MiB) in "
          f"{time.perf_counter() - started:.1f} s: {model.kernel.name} kernel, {vectors:,} "
          f"support vectors; input features (batch, {model.n_features_in}) "
          f"{args.input_type}; outputs {', '.join(outputs)}", flush=True)
    return 0


def command() -> int:
    """``sodm-export-onnx``, the console command (pyproject.toml ``[project.scripts]``)."""
    return run_job(lambda argv=None: main(argv, prog="sodm-export-onnx"))


if __name__ == "__main__":  # python -m sodm_spark.jobs.export_onnx
    sys.exit(run_job(main))
