"""What the learning-curve tests share: a machine record of another machine's, the check that a plot
has its curve drawn, and `curves` run in this process on run folders it only reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

OTHER_MACHINE = {"cpu": "Some CPU (cpu family 6, model 143, stepping 8)", "cpu_vendor": "GenuineIntel", "cpu_capability": "AVX512", "device": "cpu",
                 "torch": "2.13.0+cpu", "numpy": "2.4.6", "ale_py": "0.12.1"}


def assert_plot_drawn(path: Path) -> None:
    import matplotlib.image

    pixels = matplotlib.image.imread(path)[..., :3]
    assert pixels.shape[0] > 300 and pixels.shape[1] > 500
    # matplotlib's first line colour (tab:blue, #1f77b4) must be there: the curve, not just axes.
    blue = np.abs(pixels - np.array([0x1F, 0x77, 0xB4]) / 255).max(-1) < 0.02
    assert blue.sum() > 100


def curves_read(capsys: pytest.CaptureFixture[str], *argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m experiments.curves --runs … argv` as its `main(argv)` in this process: with --runs it
    only reads run folders and writes its out folder, starting nothing, so a process of its own would
    prove nothing more (its process behaviours, signals and leftovers, are tests/test_curves_runs.py's).
    Its exit status is main's return or SystemExit code, its output what it printed."""
    from experiments.curves import main

    assert "--runs" in argv or any(a.startswith("--runs=") for a in argv), "training seeds starts runs: that takes the real command"
    capsys.readouterr()  # what the test printed before is not curves'
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["experiments.curves", *argv], code, out, err)
