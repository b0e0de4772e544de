"""A pytest plugin for benchmarks/suite_cpu.py: each test's CPU seconds of the whole machine
(every process a test starts counts: JVMs, Spark's Python workers, jobs, servers) and its wall
seconds, written as JSON to the file ``SUITE_CPU_OUT`` names when the session ends. Only a
serial run (``-n 0``) on an otherwise idle machine gives each test its own CPU."""
import json
import os
import time

import pytest

_ROWS: list = []


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent busy since boot (/proc/stat: user, nice, system, irq
    and softirq time of every core)."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    return (ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    busy, started = machine_busy_seconds(), time.perf_counter()
    yield
    _ROWS.append({"test": item.nodeid, "cpu_seconds": machine_busy_seconds() - busy,
                  "wall_seconds": time.perf_counter() - started})


def pytest_sessionfinish(session):
    out = os.environ.get("SUITE_CPU_OUT")
    if out:
        with open(out, "w") as file:
            json.dump(_ROWS, file)
