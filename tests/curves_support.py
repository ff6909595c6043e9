"""What the learning-curve tests share: a machine record of another machine's, and the check that
a plot has its curve drawn."""

from __future__ import annotations

from pathlib import Path

import numpy as np

OTHER_MACHINE = {"cpu": "Some CPU (cpu family 6, model 143, stepping 8)", "cpu_vendor": "GenuineIntel", "cpu_capability": "AVX512", "device": "cpu",
                 "torch": "2.13.0+cpu", "numpy": "2.4.6", "ale_py": "0.12.1"}


def assert_plot_drawn(path: Path) -> None:
    import matplotlib.image

    pixels = matplotlib.image.imread(path)[..., :3]
    assert pixels.shape[0] > 300 and pixels.shape[1] > 500
    # matplotlib's first line colour (tab:blue, #1f77b4) must be there: the curve, not just axes.
    blue = np.abs(pixels - np.array([0x1F, 0x77, 0xB4]) / 255).max(-1) < 0.02
    assert blue.sum() > 100
