"""Whole runs: a search, retrain or profile end to end, subprocesses, the distributed run,
the wheel build. Every test in this folder is marked slow, so that -m "not slow" skips it."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    # A conftest's hook sees the whole session's items: mark only this folder's.
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)
