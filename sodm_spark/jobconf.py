"""Job defaults from a TOML file, overridden by command-line flags.

Every job reads the table named after it (``[train_sodm]``, ``[train_baseline]``, ...) plus
``[common]`` from the first file found of: ``--config PATH``; ``$SODM_JOBS_CONF``;
``$SPARK_CONF_DIR/sodm-jobs.toml``; the repository's ``conf/sodm-jobs.toml``. Keys are flag
names without the leading dashes (``stop-level`` or ``stop_level``). A key in the job's own
table that the job does not take is an error naming the file and the key, so a typo never
passes silently.
"""
from __future__ import annotations

import argparse
import json
import os
import tomllib
from pathlib import Path

from .storage import replace_file

CONF_NAME = "sodm-jobs.toml"
REPO_CONF = Path(__file__).resolve().parents[1] / "conf" / CONF_NAME


def gamma_arg(text):
    """argparse type of ``--gamma``: 'scale', 'auto' or a number (kept a float)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        if text in ("scale", "auto"):
            return text
        raise argparse.ArgumentTypeError(f"--gamma must be 'scale', 'auto' or a number, "
                                         f"got {text!r}")


def find_config(explicit: str | None = None) -> Path | None:
    """The TOML file a job reads (see the module docstring), or None."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise SystemExit(f"error: --config {explicit}: no such file")
        return path
    candidates = [os.environ.get("SODM_JOBS_CONF")]
    if os.environ.get("SPARK_CONF_DIR"):
        candidates.append(str(Path(os.environ["SPARK_CONF_DIR"]) / CONF_NAME))
    candidates.append(str(REPO_CONF))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def job_defaults(job: str, path: Path | None) -> tuple[dict, dict]:
    """(``[common]``, ``[job]``) tables of ``path``, keys normalized to argparse dests."""
    if path is None:
        return {}, {}
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise SystemExit(f"error: job config {path} is unreadable: {error}")

    def table(name):
        return {key.replace("-", "_"): value for key, value in document.get(name, {}).items()}

    return table("common"), table(job)


def parse_with_defaults(parser: argparse.ArgumentParser, job: str, argv=None):
    """Parse ``argv`` after loading the job's TOML defaults; returns (args, config path).

    Adds ``--config``. Flags given on the command line win over the file.
    """
    parser.add_argument("--config", help=f"TOML job defaults (default: {CONF_NAME} in "
                        "$SPARK_CONF_DIR or the repository's conf/)")
    early, _ = parser.parse_known_args(argv)
    path = find_config(early.config)
    common, own = job_defaults(job, path)
    known = {action.dest for action in parser._actions}
    unknown = sorted(set(own) - known)
    if unknown:
        raise SystemExit(f"error: {path} sets {', '.join(unknown)} for [{job}], which "
                         f"{job} does not take; see `{job} --help` for its flags.")
    # [common] keys a job does not take are skipped: they are meant for the other jobs
    parser.set_defaults(**{**{k: v for k, v in common.items() if k in known}, **own})
    return parser.parse_args(argv), path


def write_outputs(model, summary: dict, model_out: str | None, metrics_out: str | None) -> None:
    """Write the model directory and the metrics JSON of a training job, each atomically.

    The metrics go to a temporary file beside the target that is renamed over it, so a
    scheduler polling the file never reads half a JSON document.
    """
    if model_out:
        model.save(model_out)
        print(f"model written to {model_out}")
    if metrics_out:
        replace_file(metrics_out,
                     lambda staging: staging.write_text(json.dumps(summary, indent=2, default=str)))
        print(f"metrics written to {metrics_out}")
