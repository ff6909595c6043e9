import re
from pathlib import Path

from setuptools import find_packages, setup

# The version lives in configs/version.py (every command's --version prints it); read as text, so
# building the package never imports it.
VERSION = re.search(r'^VERSION = "([^"]+)"', (Path(__file__).parent / "configs" / "version.py").read_text(), re.M).group(1)

setup(
    name="breakout-ppo",
    version=VERSION,
    description="PPO that learns Atari Breakout from pixels, run and watched as a labml experiment",
    python_requires=">=3.10",
    packages=find_packages(include=["ppo", "ppo.*", "game", "game.*", "configs", "configs.*",
                                    "experiments", "experiments.*", "dashboard", "dashboard.*", "ray_setup"]),
    package_data={"dashboard": ["static/*"]},
    # One console command beside `python -m experiments.<module>`: `breakout-ppo train|evaluate|…`.
    entry_points={"console_scripts": ["breakout-ppo = experiments.commands:main"]},
    install_requires=[
        # torch is installed first, pinned, by the README's set-up (the build its index serves: CUDA
        # from PyPI on Linux, CPU from PyTorch's CPU index); any 2.x works.
        "torch>=2.1",
        "gymnasium[atari]>=1.0",
        "ale-py>=0.10",
        # The headless build of OpenCV: same cv2 module, no Qt/libGL needed on servers.
        "opencv-python-headless>=4.8",
        # Videos as H.264 MP4, which browsers play (OpenCV's own MP4 codec is MPEG-4 Part 2, which
        # they do not): PyAV, FFmpeg's libraries in-process, with libx264 in its wheels.
        "av>=18",
        "numpy>=1.24",
        "labml>=0.5.3,<0.6",
        "labml-app>=0.5.14,<0.6",
        # Learning-curve plots (experiments.curves).
        "matplotlib>=3.7",
        # The training progress line: redrawn in place, cut to the terminal's width, messages
        # written above it from any thread (experiments/run/progress.py).
        "tqdm>=4.66",
        # Other processes read through a maintained library, not hand-parsed /proc: the benchmark's
        # workers (their parent, memory), and the tests' search for a run's leftovers and open ports.
        "psutil>=6.0",
    ],
    extras_require={
        # mkdocs builds the documentation site (mkdocs.yml; CI runs `mkdocs build --strict`).
        "dev": ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6", "ruff>=0.5", "mypy>=1.10", "mkdocs>=1.6"],
        # Env workers as Ray actors and sweeps on a cluster (--backend ray, experiments.sweep).
        "ray": ["ray>=2.60"],
        # The peer in learning curves: SB3's PPO with the rl-zoo Atari settings (experiments.curves --peer sb3).
        "compare": ["stable-baselines3>=2.3"],
    },
)
