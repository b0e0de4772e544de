"""The real table at scale: 3,000,000 US domestic flights of January to June 2001, as the npm
package ``vega-datasets`` (version 3.2.1) ships them; numpy, pandas and pyarrow only, no Spark.

Where the rows come from: ``data/flights-3m.parquet`` of ``vega-datasets``, whose catalogue
(``datapackage.json``, resource ``flights_3m``) describes it as "Flight delay statistics
(3 million rows) from U.S. Bureau of Transportation Statistics. Collected under regulatory
reporting requirements (14 CFR Part 234), which mandate that qualifying airlines report on-time
performance data to BTS" (the BTS "Reporting Carrier On-Time Performance" table), sampled and
transformed by the package's ``scripts/flights.py``; and ``data/airports.csv`` (iata, name,
city, state, country, latitude, longitude; 3,376 airports, from the catalogue's "Airports
(Data.gov)"). The package's columns: ``date`` (timestamp), ``delay`` (the arrival delay in
minutes, BTS ``ArrDelay``), ``distance`` (miles), ``origin`` and ``destination`` (IATA codes);
cancelled flights and rows with a missing field were dropped by the package.

The task: is a flight more than 15 minutes late at arrival (``delay > 15``: 599,055 of the
3,000,000 rows, 19.97%; the majority class scores 0.800)? The features, in this order: month
(1-12; 1-6 here, and 7 for the six departures at 24:00 on 30 June), weekday (0 Monday to
6 Sunday), the minute of the day of ``date`` (0-1439), the distance, and the origin's and the
destination's latitude and longitude (``airports.csv`` by IATA code; a code it lacks gets the
column's mean over the other rows: in version 3.2.1 every one of the 229 origins and 228
destinations is listed, so that rule touches no row).

What ``date`` is: the package's script joins BTS's ``FlightDate`` (the scheduled day) with
``DepTime``, the *actual* departure time (``CRSDepTime``, the scheduled one, is not in the
file), and moves a departure at 24:00 to the next day. So month and weekday are the schedule's,
but the minute of the day is when the flight left: a flight held three hours leaves three hours
later in the day, and one delayed past midnight shows up in the small hours of its scheduled
day (departures between 02:00 and 04:00 are 66-68% late, against 4-7% between 05:00 and
07:00). The column carries part of the departure delay, known only once the flight has left;
every method of a benchmark sees the same columns, so comparisons between them stay fair, but
the accuracies are not those of a prediction made before departure (as the ``flights`` set of
:mod:`.flights` is).

Nothing is downloaded here: ``npm pack vega-datasets@3.2.1`` writes the package's tarball once
(:data:`NPM_HINT`), and :func:`vega_folder` finds the two files in a folder given, in
``$SODM_VEGA_DATASETS``, or in ``~/.cache/sodm_spark/vega-datasets/``.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from .datasets import DatasetUnavailable

LATE_MINUTES = 15  # late: delay > 15 minutes (19.97% of the rows)
VEGA_VERSION = "3.2.1"
FLIGHTS_FILE, AIRPORTS_FILE = "flights-3m.parquet", "airports.csv"
ENV_FOLDER = "SODM_VEGA_DATASETS"
CACHE_FOLDER = Path("~/.cache/sodm_spark/vega-datasets")
FEATURES = ("month", "weekday", "dep_minute", "distance", "origin_lat", "origin_lon",
            "dest_lat", "dest_lon")
COLUMNS = ("date", "delay", "distance", "origin", "destination")
NPM_HINT = (f"npm pack vega-datasets@{VEGA_VERSION} && tar xzf vega-datasets-{VEGA_VERSION}.tgz "
            f"package/data/{FLIGHTS_FILE} package/data/{AIRPORTS_FILE}")


def _holds_files(folder: Path) -> Path | None:
    """``folder`` itself, or its ``data/`` or ``package/data/`` (the unpacked tarball), if it
    holds both files."""
    for candidate in (folder, folder / "data", folder / "package" / "data"):
        if all((candidate / name).is_file() for name in (FLIGHTS_FILE, AIRPORTS_FILE)):
            return candidate
    return None


def vega_folder(folder: str | Path | None = None) -> Path:
    """The folder holding ``flights-3m.parquet`` and ``airports.csv``: ``folder`` when given,
    else ``$SODM_VEGA_DATASETS`` when set, else ``~/.cache/sodm_spark/vega-datasets/``.
    Raises :class:`~.datasets.DatasetUnavailable` (one line: the npm command, where to put the
    files) when the files are not there."""
    if folder is not None:
        places = [Path(folder).expanduser()]
    elif os.environ.get(ENV_FOLDER):
        places = [Path(os.environ[ENV_FOLDER]).expanduser()]
    else:
        places = [CACHE_FOLDER.expanduser()]
    for place in places:
        found = _holds_files(place)
        if found is not None:
            return found
    raise DatasetUnavailable(
        f"the us-flights data ({FLIGHTS_FILE} and {AIRPORTS_FILE} of the npm package "
        f"vega-datasets {VEGA_VERSION}) are not in {', '.join(map(str, places))}: run "
        f"`{NPM_HINT}` and move the two files from package/data/ to {CACHE_FOLDER}/ (or point "
        f"{ENV_FOLDER}, or --dataset-root, at their folder).")


def _coordinates(codes, airports) -> tuple[np.ndarray, np.ndarray]:
    """(latitude, longitude) of each row's IATA code (a pyarrow string column), a code
    ``airports`` lacks given the column's mean over the other rows. The codes are
    dictionary-encoded first: a few hundred look-ups, not one per row."""
    import pyarrow as pa

    encoded = codes.combine_chunks().dictionary_encode() if isinstance(
        codes, pa.ChunkedArray) else codes.dictionary_encode()
    if encoded.null_count:
        raise InputError(f"{encoded.null_count} rows have no airport code.")
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    table = airports.set_index("iata")[["latitude", "longitude"]]
    known = table.reindex(encoded.dictionary.to_pylist()).to_numpy(dtype=np.float64)
    latitude, longitude = known[indices, 0], known[indices, 1]
    missing = np.isnan(latitude) | np.isnan(longitude)
    if missing.all():
        raise InputError("no airport code of the flights is in airports.csv.")
    latitude[missing] = latitude[~missing].mean()
    longitude[missing] = longitude[~missing].mean()
    return latitude, longitude


def read_flights_table(folder: Path):
    """The five columns of ``flights-3m.parquet``, checked: each present, none null."""
    import pyarrow.parquet as pq

    path = folder / FLIGHTS_FILE
    table = pq.read_table(path)
    absent = [name for name in COLUMNS if name not in table.column_names]
    if absent:
        raise InputError(f"{path} has no column {', '.join(absent)} (columns: "
                         f"{', '.join(table.column_names)}); is it vega-datasets' "
                         f"{FLIGHTS_FILE}?")
    nulls = [name for name in COLUMNS if table.column(name).null_count]
    if nulls:
        raise InputError(f"{path}: the column(s) {', '.join(nulls)} hold missing values.")
    return table


def load_us_flights(folder: str | Path | None = None, late_minutes: float = LATE_MINUTES):
    """``(X float32 (3,000,000 × 8), y ±1 float64: +1 more than ``late_minutes`` late at
    arrival, feature names)`` in the file's row order (by departure); the columns, their
    sources and what ``date`` holds: the module docstring. ``folder``: :func:`vega_folder`.

    A code missing from ``airports.csv`` gets that column's mean over the other rows (in
    vega-datasets 3.2.1 no row: every code is listed)."""
    import pandas as pd

    where = vega_folder(folder)
    table = read_flights_table(where)
    airports = pd.read_csv(where / AIRPORTS_FILE, usecols=["iata", "latitude", "longitude"])
    airports = airports.dropna().drop_duplicates("iata")
    dates = pd.DatetimeIndex(table.column("date").to_numpy())
    origin_lat, origin_lon = _coordinates(table.column("origin"), airports)
    dest_lat, dest_lon = _coordinates(table.column("destination"), airports)
    columns = (dates.month, dates.weekday, dates.hour * 60 + dates.minute,
               table.column("distance").to_numpy(), origin_lat, origin_lon, dest_lat, dest_lon)
    X = np.empty((table.num_rows, len(FEATURES)), dtype=np.float32)
    for number, column in enumerate(columns):
        X[:, number] = np.asarray(column, dtype=np.float64)
    y = np.where(table.column("delay").to_numpy() > late_minutes, 1.0, -1.0)
    return X, y, list(FEATURES)



def load_us_flights_frame(folder: str | Path | None = None,
                          late_minutes: float = LATE_MINUTES):
    """The rows of :func:`load_us_flights` as a pandas DataFrame with the two airports as
    their IATA codes (``origin``, ``destination``: strings) instead of their coordinates, the
    other columns as numbers, and ``label`` (1 late, 0 not)."""
    import pandas as pd

    table = read_flights_table(vega_folder(folder))
    dates = pd.DatetimeIndex(table.column("date").to_numpy())
    frame = pd.DataFrame({"month": np.asarray(dates.month, dtype=np.float32),
                          "weekday": np.asarray(dates.weekday, dtype=np.float32),
                          "dep_minute": np.asarray(dates.hour * 60 + dates.minute,
                                                   dtype=np.float32),
                          "distance": np.asarray(table.column("distance").to_numpy(),
                                                 dtype=np.float32)})
    for name in ("origin", "destination"):
        frame[name] = table.column(name).to_numpy(zero_copy_only=False).astype(str)
    frame["label"] = (table.column("delay").to_numpy() > late_minutes).astype(np.int64)
    return frame
