"""The files of one input must describe the same columns: Parquet files whose column names or
types differ, and CSV files whose headers differ, are refused before any work, naming the first
file that disagrees with the first one and the difference.

Spark's readers do not: a Parquet folder is read with the schema of one of its files (a column
only the other files have is dropped, or read as nulls), and a CSV read with a header skips
the first line of every file without comparing it to the first file's, so a file whose columns
come in another order is read by position. Either way a fit trains on columns it was not meant
to, and a model scores the wrong ones, without a word.

Parquet footers are read by pyarrow on the driver (a few milliseconds a file, for a local path
or a URI pyarrow reaches); an input only Spark reaches (``hdfs://`` on a classic session) is
compared through Spark: its schema with ``mergeSchema`` against the one Spark reads by default.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote, urlparse

from .blocks import DataFormatError, error_text

#: Columns a refusal names of each kind of difference.
SHOWN_COLUMNS = 6


def listed_files(statuses) -> tuple[object, list[str]] | None:
    """(the pyarrow file system, the sorted data files under ``statuses``: files, and files
    in folders at any depth, but names starting with ``_`` or ``.`` as Spark skips them), or
    None when pyarrow cannot reach them."""
    import pyarrow.fs as pafs

    from ...data.filesystems import arrow_uri

    paths = [str(status.getPath().toUri()) for status in statuses]
    schemes = {urlparse(path).scheme for path in paths}
    try:
        if schemes <= {"", "file"}:
            filesystem = pafs.LocalFileSystem()
            inner = [unquote(urlparse(path).path) for path in paths]
        else:
            pairs = [pafs.FileSystem.from_uri(arrow_uri(path)) for path in paths]
            filesystem, inner = pairs[0][0], [name for _, name in pairs]
        files = []
        for info in filesystem.get_file_info(inner):
            if info.type == pafs.FileType.Directory:
                files += [child.path for child in filesystem.get_file_info(
                    pafs.FileSelector(info.path, recursive=True))
                    if child.type == pafs.FileType.File and not _hidden(child.path, info.path)]
            elif info.type == pafs.FileType.File:
                files.append(info.path)
    except Exception:  # noqa: BLE001 - a scheme or credentials only Spark has: Spark compares
        return None
    return filesystem, sorted(files)


def _hidden(path: str, root: str) -> bool:
    """Whether a file below ``root`` is one Spark's readers skip (``_SUCCESS``, ``.crc``, a
    folder named so)."""
    relative = os.path.relpath(path, root)
    return any(part.startswith(("_", ".")) and "=" not in part
               for part in relative.split(os.sep))


def schema_difference(first, other) -> str:
    """What ``other`` (a pyarrow schema) has that ``first`` has not, and the reverse, and the
    columns whose types differ: one clause each, the columns named."""
    first_types = {field.name: field.type for field in first}
    other_types = {field.name: field.type for field in other}
    clauses = []
    extra = [name for name in other_types if name not in first_types]
    lacking = [name for name in first_types if name not in other_types]
    retyped = [f"{name!r} {first_types[name]} there, {other_types[name]} here"
               for name in first_types if name in other_types
               and not first_types[name].equals(other_types[name])]
    if extra:
        clauses.append(f"it has column(s) {_names(extra)} that the first file has not")
    if lacking:
        clauses.append(f"it lacks column(s) {_names(lacking)}")
    if retyped:
        clauses.append("types differ: " + "; ".join(retyped[:SHOWN_COLUMNS]))
    return ", ".join(clauses)


def _names(names) -> str:
    shown = ", ".join(repr(name) for name in names[:SHOWN_COLUMNS])
    return shown + (f" and {len(names) - SHOWN_COLUMNS} more" if len(names) > SHOWN_COLUMNS
                    else "")


def check_parquet_files_agree(spark, statuses, path, flag: str = "") -> None:
    """Refuse the Parquet input ``path`` (its listed ``statuses``) when its files' columns
    differ in name or type (the order of the columns may differ: they are read by name),
    naming the first file that differs from the first one and how. ``flag`` names the
    setting in the message (``--data``, say)."""
    import pyarrow.parquet as pq

    listed = listed_files(statuses)
    where = f"{flag} {path}".strip()
    if listed is None:
        _check_by_spark(spark, path, where)
        return
    filesystem, files = listed
    if len(files) < 2:
        return

    def schema(name):
        try:
            return pq.read_schema(name, filesystem=filesystem)
        except Exception as exc:  # noqa: BLE001 - named with its file below
            return exc

    with ThreadPoolExecutor(max_workers=8) as pool:
        schemas = list(pool.map(schema, files))
    first = schemas[0]
    if isinstance(first, Exception):
        raise DataFormatError(f"{where}: {files[0]} is not a readable Parquet file "
                              f"({error_text(first)}).", path=files[0])
    for name, other in zip(files[1:], schemas[1:]):
        if isinstance(other, Exception):
            raise DataFormatError(f"{where}: {name} is not a readable Parquet file "
                                  f"({error_text(other)}).", path=name)
        if not _same_columns(first, other):
            raise DataFormatError(
                f"{where}: the files do not describe the same columns: {name} differs from "
                f"{files[0]} ({schema_difference(first, other)}). Write every file of one "
                "input with the same columns and types, or give the files that agree.",
                path=name)


def _same_columns(first, other) -> bool:
    """Whether two schemas hold the same column names with the same types, in any order
    (Parquet columns are read by name; a field's metadata, pandas' index say, is ignored)."""
    if len(first) != len(other):
        return False
    types = {field.name: field.type for field in first}
    return all(field.name in types and types[field.name].equals(field.type) for field in other)


def _check_by_spark(spark, path, where) -> None:
    """The comparison through Spark, for an input pyarrow does not reach: the schema merged
    over every file against the one Spark takes from a single file."""
    try:
        merged = spark.read.option("mergeSchema", "true").parquet(str(path)).schema
        plain = spark.read.parquet(str(path)).schema
    except Exception as exc:  # noqa: BLE001 - Spark refuses to merge: types that conflict
        raise DataFormatError(f"{where}: the files do not describe the same columns (Spark "
                              f"could not merge their schemas: {error_text(exc)}). Write "
                              "every file of one input with the same columns and types.",
                              path=str(path)) from None
    plain_names = {field.name for field in plain.fields}
    extra = [field.name for field in merged.fields if field.name not in plain_names]
    if extra:
        raise DataFormatError(f"{where}: the files do not describe the same columns: some "
                              f"have column(s) {_names(extra)} that others lack. Write every "
                              "file of one input with the same columns and types.",
                              path=str(path))


def header_difference(first: list[str], other: list[str]) -> str:
    """How a CSV file's header ``other`` differs from the first file's ``first``."""
    if sorted(first) == sorted(other):
        return (f"the same columns in another order ({_names(other)} where the first file has "
                f"{_names(first)})")
    extra = [name for name in other if name not in first]
    lacking = [name for name in first if name not in other]
    clauses = [f"it has column(s) {_names(extra)} that the first file has not"] if extra else []
    if lacking:
        clauses.append(f"it lacks column(s) {_names(lacking)}")
    return ", ".join(clauses) or f"{len(other)} columns where the first file has {len(first)}"
