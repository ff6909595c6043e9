"""ruff (style, imports, complexity ≤ 12) and mypy (types) over the whole project, as part of the
suite, so the README's one test command is also the lint and type check CI runs."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_ruff_is_clean() -> None:
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode:
        pytest.skip('ruff is not installed (pip install -e ".[dev]")')
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:]


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    pytest.importorskip("mypy", reason='mypy is not installed (pip install -e ".[dev]")')
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0 and "Success" in result.stdout, result.stdout[-4000:]
