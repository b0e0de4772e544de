"""Job defaults from a TOML file, overridden by command-line flags.

Every job reads the table named after it (``[train_sodm]``, ``[train_baseline]``, ...) plus
``[common]`` from the first file found of: ``--config PATH``; ``$SODM_JOBS_CONF``;
``$SPARK_CONF_DIR/sodm-jobs.toml``; the repository's ``conf/sodm-jobs.toml`` (a source
checkout); the copy installed with the package (``sodm_spark/conf_defaults/``, what a wheel
has). Keys are flag names without the leading dashes (``stop-level`` or ``stop_level``). A key
in the job's own table that the job does not take is an error naming the file and the key, so a
typo never passes silently.

The package carries the repository's ``conf/spark-defaults.conf``, ``log4j2.properties`` and
``sodm-jobs.toml`` (tests/test_packaging.py keeps the two copies identical): a console command
started where no Spark configuration is set points ``SPARK_CONF_DIR`` at them
(:func:`use_packaged_spark_conf`), as the repository's commands do with ``SPARK_CONF_DIR=conf``.
"""
from __future__ import annotations

import argparse
import importlib.resources
import importlib.util
import json
import os
import re
import tomllib
from pathlib import Path

from ..core.errors import EXIT_CODES, SETTINGS, JobExit, SettingsError
from ..data.filesystems import is_uri, local_path, split, uri_scheme
from ..data.storage import replace_file, store_for

CONF_NAME = "sodm-jobs.toml"
#: conf/ of a source checkout: this module is sodm_spark/ops/jobconf.py, two folders below the
#: repository root (an installed package has no such file: it reads :func:`packaged_conf`)
REPO_CONF = Path(__file__).resolve().parents[2] / "conf" / CONF_NAME
#: The folder of configuration files installed with the package (package data, no modules)
PACKAGED_CONF_DIR = "conf_defaults"
#: What the JVM reads from SPARK_CONF_DIR (the jobs' defaults, sodm-jobs.toml, sit beside them)
SPARK_CONF_FILES = ("spark-defaults.conf", "log4j2.properties")


def packaged_conf(name: str = CONF_NAME):
    """The installed copy of ``conf/<name>`` (an importlib.resources Traversable: a file, or an
    entry of the zip that --py-files ships), or None if the package was built without it."""
    entry = importlib.resources.files("sodm_spark").joinpath(PACKAGED_CONF_DIR, name)
    return entry if entry.is_file() else None



def gamma_arg(text):
    """argparse type of ``--gamma``: 'scale', 'auto' or a number (kept a float)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        if text in ("scale", "auto"):
            return text
        raise argparse.ArgumentTypeError(f"--gamma must be 'scale', 'auto' or a number, "
                                         f"got {text!r}") from None


def find_config(explicit: str | None = None):
    """The TOML file a job reads (see the module docstring): a Path, the packaged copy (a
    Traversable: a Path unless the package runs from a zip), or None."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise JobExit(SETTINGS, f"--config {explicit}: no such file")
        return path
    candidates = [os.environ.get("SODM_JOBS_CONF")]
    if os.environ.get("SPARK_CONF_DIR"):
        candidates.append(str(Path(os.environ["SPARK_CONF_DIR"]) / CONF_NAME))
    candidates.append(str(REPO_CONF))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return packaged_conf()


def use_packaged_spark_conf(environ=os.environ) -> str | None:
    """Point ``SPARK_CONF_DIR`` at the configuration installed with the package when a command
    starts Spark itself and would find none: no ``SPARK_CONF_DIR``, no JVM already up
    (spark-submit's: its configuration was read before this runs), and no spark-defaults.conf in
    ``$SPARK_HOME/conf`` (pip's pyspark ships none). The JVM the session launches then reads
    its memory settings and the jobs' logging (conf/README.md), as ``SPARK_CONF_DIR=conf``
    gives the repository's commands. Returns the folder set, or None when it leaves things as
    they are (also when the package runs from a zip, which Spark cannot read a folder from)."""
    if environ.get("SPARK_CONF_DIR") or environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    home = environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")
        locations = list(spec.submodule_search_locations or []) if spec else []
        home = locations[0] if locations else None
    if home and (Path(home) / "conf" / "spark-defaults.conf").is_file():
        return None
    folder = importlib.resources.files("sodm_spark").joinpath(PACKAGED_CONF_DIR)
    if not isinstance(folder, Path) or not all((folder / name).is_file()
                                               for name in SPARK_CONF_FILES):
        return None
    environ["SPARK_CONF_DIR"] = str(folder)
    return str(folder)


def job_defaults(job: str, path: Path | None) -> tuple[dict, dict]:
    """(``[common]``, ``[job]``) tables of ``path``, keys normalized to argparse dests."""
    if path is None:
        return {}, {}
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise JobExit(SETTINGS, f"job config {path} is unreadable: {error}") from None

    def table(name):
        return {key.replace("-", "_"): value for key, value in document.get(name, {}).items()}

    return table("common"), table(job)


def parse_with_defaults(parser: argparse.ArgumentParser, job: str, argv=None):
    """Parse ``argv`` after loading the job's TOML defaults; returns (args, config path).

    Adds ``--config`` and ``--verbose``. Flags given on the command line win over the file.
    """
    parser.add_argument("--config", help=f"TOML job defaults (default: $SODM_JOBS_CONF, else "
                        f"{CONF_NAME} in $SPARK_CONF_DIR, else the repository's conf/ or the "
                        "copy installed with the package)")
    add_verbose(parser)
    refuse_in_one_line(parser)
    early, _ = parser.parse_known_args(argv)
    path = find_config(early.config)
    common, own = job_defaults(job, path)
    known = {action.dest for action in parser._actions}
    unknown = sorted(set(own) - known)
    if unknown:
        raise JobExit(SETTINGS, f"{path} sets {', '.join(unknown)} for [{job}], which {job} "
                      f"does not take; see `{job} --help` for its flags.")
    # [common] keys a job does not take are skipped: they are meant for the other jobs
    parser.set_defaults(**{**{k: v for k, v in common.items() if k in known}, **own})
    return parser.parse_args(argv), path


def refuse_in_one_line(parser: argparse.ArgumentParser) -> None:
    """A flag argparse refuses ends the job like any bad setting: one ``error: ...`` line and
    exit code 2, without the usage text (``--help`` shows it)."""
    def error(message):
        parser.exit(EXIT_CODES[SETTINGS], f"error: {message}; see {parser.prog} --help\n")

    parser.error = error  # type: ignore[method-assign]  # this parser's own, on purpose


def add_master_arguments(parser) -> None:
    """``--master`` (a Spark master or a Spark Connect server) and ``--connect-timeout`` (how
    long a Connect server may take to answer, at the start and after it stops answering
    mid-job; sodm_spark.spark.session.connect_timeout) of the jobs that run on Spark Connect.
    ``parser``: an ArgumentParser or one of its argument groups."""
    parser.add_argument("--master", help="Spark master, or a Spark Connect server: "
                        "sc://host:port, or connect:local[N] for a local one; default: "
                        "spark-submit's, else $SPARK_REMOTE, else local[*]")
    parser.add_argument("--connect-timeout", type=float, metavar="SECONDS",
                        help="Spark Connect: seconds to wait for the server to answer, at the "
                        "start and when it stops answering mid-job, before the job ends with "
                        "one line naming its address (default: $SODM_CONNECT_TIMEOUT, else "
                        "20)")


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """``--verbose``: a failure prints its full trace (Python and Java) before its one line;
    sodm_spark.core.errors.run_job reads it from the command line."""
    parser.add_argument("--verbose", action="store_true",
                        help="on a failure, print the full trace too (it always goes to the "
                        "log file, $SODM_LOG_FILE or logs/sodm-spark.log, for an unexpected one)")


def _writable_ancestor(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` if it is a directory this process may write
    into, else None."""
    for parent in path.absolute().parents:
        if parent.exists():
            return parent if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK) else None
    return None


def check_output_paths(directories: dict, files: dict) -> None:
    """Refuse, before any data is read, outputs a job could not write at the end:
    ``directories`` and ``files`` map a flag (``"--model-out"``) to its path or None. A
    directory output must not be an existing file, a file output not an existing directory,
    and the nearest existing directory above each must be writable (missing directories are
    created at the end). ``file:`` URIs are checked as the local paths they name; other URIs
    (hdfs://, s3a://, ...) are left to their store.
    Raises SettingsError (a ValueError) naming the flag, the path and what to do."""
    for flag, value in {**directories, **files}.items():
        if not value or (is_uri(value) and uri_scheme(value) != "file"):
            continue
        path = Path(local_path(value) if is_uri(value) else value)
        is_directory = flag in directories
        if is_directory and path.exists() and not path.is_dir():
            raise SettingsError(f"{flag} {value} is a file; this output is a directory. Choose "
                             "another path or remove the file.")
        if not is_directory and path.is_dir():
            raise SettingsError(f"{flag} {value} is a directory; this output is a file. Give a "
                             "file name.")
        # a file is replaced through a sibling; a directory gets new entries inside it
        where = path / "entry" if is_directory and path.exists() else path
        if _writable_ancestor(where) is None:
            raise SettingsError(f"{flag} {value} cannot be written by this user (no write "
                             "permission where it would go); choose a writable location.")


_URI_ROOT = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*")  # scheme://authority (a bucket)


def _folders_above(uri: str) -> list[str]:
    """The folders above ``uri`` up to its root ``scheme://authority/``, nearest first (none
    for a URI without an authority)."""
    root = _URI_ROOT.match(uri)
    if root is None:
        return []
    folders, parent = [], split(uri)[0]
    while len(parent) > len(root.group(0)):
        folders.append(parent)
        parent = split(parent)[0]
    return [*folders, root.group(0) + "/"]


def check_store_outputs(directories: dict, files: dict) -> None:
    """The outputs given as URIs of another store than the local disk (:func:`check_output_paths`
    checks local paths), checked on the store that will write them, once the job's Spark
    session runs (:func:`~sodm_spark.data.storage.store_for` takes its Hadoop file system
    first) and before any data is read: a directory output must not be a file, a file output
    not a directory, and its bucket or container (the URI's root) must exist. A store that
    cannot be reached fails here too, in one line (StoreError), rather than after the work."""
    for flag, value in {**directories, **files}.items():
        if not value or not is_uri(value) or uri_scheme(value) == "file":
            continue
        value = str(value).rstrip("/")
        store = store_for(value)
        if store.exists(value):
            if flag in directories and not store.is_dir(value):
                raise SettingsError(f"{flag} {value} is a file; this output is a directory. "
                                    "Choose another path or remove the file.")
            if flag in files and store.is_dir(value):
                raise SettingsError(f"{flag} {value} is a directory; this output is a file. "
                                    "Give a file name.")
            continue
        folders = _folders_above(value)
        if folders and not any(store.exists(folder) for folder in folders):
            raise SettingsError(f"{flag} {value}: {folders[-1]} does not exist on its store "
                                "(no such bucket or container); create it, or check the URI "
                                "and the store's endpoint.")


def write_outputs(model, summary: dict, model_out: str | None, metrics_out: str | None) -> None:
    """Write the model directory and the metrics JSON of a training job, each atomically (a
    local path or any store by URI).

    The metrics replace the file whole (a temporary file renamed over it, or one PUT on an
    object store), so a scheduler polling the file never reads half a JSON document.
    """
    if model_out:
        model.save(model_out)
        print(f"model written to {model_out}")
    if metrics_out:
        replace_file(metrics_out,
                     lambda staging: staging.write_text(json.dumps(summary, indent=2, default=str)))
        print(f"metrics written to {metrics_out}")
