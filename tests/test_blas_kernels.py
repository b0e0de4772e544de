"""The numerical tests hold whatever BLAS kernels run them.

OpenBLAS picks its kernels for the CPU it finds (SkylakeX, Haswell, Zen, ...), and each kernel
sums a product in its own order, so the last digits of every GEMM differ from machine to
machine. A tolerance that holds only for this machine's kernels fails on the next CI machine.
The Spark-free numerical tests (marked ``numerics``) are rerun here in a child pytest under two
other kernel families forced with ``OPENBLAS_CORETYPE`` (DYNAMIC_ARCH builds, as numpy's and
scipy's wheels are): Prescott's SSE3 kernels, the oldest, and Haswell's AVX2 ones. The child
is given only the test files that mark tests ``numerics`` (found by reading them, so that a new
one is never left out): importing the rest of the suite would cost it time and test nothing. It
runs in one process (``-n 0``): the suite's own workers already keep the cores busy.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
OTHER_KERNELS = ("Prescott", "Haswell")
_PROBE = ("import numpy, scipy.linalg; from threadpoolctl import threadpool_info; "
          "print(','.join(sorted({str(i.get('architecture')) for i in threadpool_info() "
          "if i['internal_api'] == 'openblas'})))")


#: how a test file marks its tests numerical: ``pytestmark = pytest.mark.numerics`` or
#: ``@pytest.mark.numerics`` (or ``mark.numerics`` after ``from pytest import mark``)
_NUMERICS_MARK = re.compile(r"\bmark\.numerics\b")


def numerics_test_files():
    """The test files that mark any test ``numerics``: the only ones the child needs."""
    return sorted(path for path in TESTS.glob("test_*.py") if path.name != Path(__file__).name
                  and _NUMERICS_MARK.search(path.read_text(encoding="utf-8")))


def _environment(core_type):
    env = dict(os.environ, OPENBLAS_CORETYPE=core_type)
    env.pop("PYTEST_ADDOPTS", None)
    return env


@pytest.mark.parametrize("core_type", OTHER_KERNELS)
def test_the_numerical_tests_pass_under_other_blas_kernels(core_type):
    probe = subprocess.run([sys.executable, "-c", _PROBE], env=_environment(core_type),
                           capture_output=True, text=True, timeout=120)
    architecture = probe.stdout.strip()
    if probe.returncode != 0 or not architecture:
        pytest.skip(f"numpy and scipy run no OpenBLAS here ({probe.stderr.strip()[-200:]})")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-m",
         "numerics and not uses_spark", *map(str, numerics_test_files())],
        env=_environment(core_type), cwd=TESTS.parent, capture_output=True, text=True,
        timeout=900)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-500:]
    assert run.returncode == 0, \
        f"under OPENBLAS_CORETYPE={core_type} (kernels {architecture}):\n" + run.stdout[-6000:]
    assert " passed" in summary and not re.search(r"\d+ failed", summary), summary
