"""pytest setup of the bitrank Python tests (no test logic here).

The package is imported from this source tree (<repo>/python first on sys.path, and
on PYTHONPATH for the `python -m bitrank` subprocesses of tests); its library is found
by bitrank._lib: $BITRANK_LIBRARY, else bitrank/libbitrank.so, else the repository's
build/ or build-cpu/ (scripts/test sets BITRANK_LIBRARY=build/libbitrank.so).

Markers:
  cuda  needs a CUDA GPU: skipped when torch.cuda.is_available() is false
  slow  a long test; `-m "not slow"` leaves it out
"""
import os
import sys

# before torch loads its OpenMP runtime, which the library shares: spinning threads of
# one starve the other on small machines (bitrank/__init__.py says more)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if PYTHON_DIR in sys.path:
    sys.path.remove(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)
_pp = os.environ.get("PYTHONPATH", "")
if PYTHON_DIR not in _pp.split(os.pathsep):
    os.environ["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + _pp if _pp else "")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda: needs a CUDA GPU (skipped when torch.cuda.is_available() is false)")
    config.addinivalue_line("markers", "slow: a long test (deselect with -m 'not slow')")


def _cuda_available():
    try:
        import torch
    except Exception:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    cuda_items = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is false)")
    for item in cuda_items:
        item.add_marker(skip)
