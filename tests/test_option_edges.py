"""Every option of every command fed its edge values: 0, -1, a huge number, NaN, inf, a word, an
integer past 64 bits, an empty string and a name longer than a file name may be. Each value is
either refused in one line naming the option (exit 2) or, where the option takes it, it passes and
a later check (a "guard" the table names, such as a device this machine lacks) refuses the command
line instead; either way nothing starts: no run folder, no child process.

The commands' own `main(argv)` are called in-process: the real parsing and checks, without a
Python start per value. Which values each option takes is written out here by hand, from the
ranges its --help states.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from configs.ppo import FIELDS
from tests.conftest import REPO
from tests.process_table import children

EDGES = {
    "zero": "0", "negative": "-1", "huge": "1e308", "nan": "nan", "inf": "inf", "word": "x",
    "overflow": "99999999999999999999999999", "empty": "", "long": "y" * 300,
}
ALL = frozenset(EDGES)
NONE: frozenset[str] = frozenset()
ZERO = frozenset({"zero"})
BIG = frozenset({"huge", "overflow"})  # finite floats
GUARD_DEVICE = ["--device", "cuda:99"]  # refused after every other check: no such GPU anywhere
GUARD_MESSAGE = "--device cuda:99: expected "

# Which edge values each training option takes (the rest are refused, naming the option).
BOOLEANS = ("fire_on_reset", "terminal_on_life_loss", "reset_stack_on_life_loss", "clip_rewards", "anneal_learning_rate",
            "anneal_clip_range", "clip_value_loss", "normalize_advantages", "overlap_sampling", "channels_last", "skip_nonfinite")
TRAINING: dict[str, frozenset[str]] = {
    **{name: ZERO for name in BOOLEANS},  # 0 is false
    "game": NONE, "noop_max": ZERO, "relaunch": NONE, "frame_skip": NONE, "frame_stack": NONE, "max_episode_frames": NONE,
    "n_workers": NONE, "envs_per_worker": NONE, "worker_steps": NONE, "backend": NONE, "ray_address": NONE,
    "ray_cpus_per_worker": NONE, "total_env_steps": NONE, "stop_after_env_steps": NONE, "updates": NONE, "epochs": NONE,
    "minibatches": NONE, "gamma": ZERO, "gae_lambda": ZERO, "learning_rate": ZERO, "clip_range": ZERO,
    # Unbounded above (a clip, a norm, an ε the arithmetic takes at any finite size): 10^26 is a float too.
    "value_clip_range": ZERO | BIG, "value_coef": ZERO, "entropy_coef": ZERO,
    "max_grad_norm": BIG, "adam_eps": BIG, "target_kl": BIG,
    "seed": ZERO, "device": NONE, "torch_threads": ZERO, "sample_threads": NONE, "precision": NONE,
    "name": frozenset({"zero", "huge", "nan", "inf", "word", "overflow"}),
    "data_dir": frozenset({"zero", "negative", "huge", "nan", "inf", "word", "overflow"}),
    "checkpoint_every": ZERO, "score_window": NONE, "max_worker_restarts": ZERO, "restart_window": NONE,
    "worker_timeout": NONE, "eval_video_every": ZERO, "dashboard": NONE, "dashboard_wait": NONE,
}


def test_the_table_names_every_training_option() -> None:
    assert set(TRAINING) == {f.name for f in FIELDS}


@functools.cache
def _main(module: str) -> Callable[[list[str]], int]:
    """`module`'s main: a module by name, or a script of tools/ by its path (tools/ is no package)."""
    if not module.endswith(".py"):
        return importlib.import_module(module).main
    spec = importlib.util.spec_from_file_location(Path(module).stem, REPO / module)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.main


def _refused(module: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one stderr line of `module`'s main(argv), which must exit with code 2 and start nothing."""
    main = _main(module)
    # Children an earlier test of the session left running on purpose (multiprocessing's forkserver
    # lives as long as the test process) are not this call's: only new ones count.
    before = set(children(os.getpid()))
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 2, (argv, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and out == "", (argv, err)
    assert set(children(os.getpid())) - before == set(), argv
    return lines[0]


def _cases(table: dict[str, frozenset[str]]) -> list[tuple[str, str, bool]]:
    return [(name, edge, edge in accepted) for name, accepted in table.items() for edge in EDGES]


@pytest.mark.parametrize(("name", "edge", "accepted"), _cases(TRAINING))
def test_a_training_option_at_its_edges(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                        name: str, edge: str, accepted: bool) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --data-dir would land here
    option = "--" + name.replace("_", "-")
    base = [*GUARD_DEVICE, "--data-dir", str(tmp_path / "runs")]
    line = _refused("experiments.breakout", [*base, option, EDGES[edge]], capsys)
    if accepted:
        assert line.startswith(f"error: {GUARD_MESSAGE}") or (name == "device"), line
    else:
        assert line.startswith(f"error: {option} "), line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# Other commands: (module, options → values taken, argv that makes a taken value refused later, its text).
EVALUATE = {"games": NONE, "seed": ZERO, "epsilon": ZERO, "max_steps": NONE, "device": NONE, "video": NONE, "run": NONE,
            "checkpoint": NONE, "data_dir": ALL}  # --data-dir is only read with --run
VALUE_CLIP = {"epsilons": ZERO | BIG, "device": NONE, "run": NONE, "checkpoint": NONE, "data_dir": ALL}
CURVES = {"seeds": ZERO, "total_env_steps": NONE, "budget": NONE, "jobs": NONE, "window": NONE, "grid": NONE,
          "budgets": NONE, "until": NONE, "peer": NONE, "runs": NONE}
CHAOS = {"updates": NONE, "interruptions": ZERO, "kills": ZERO, "seed": ZERO}
BENCHMARK = {"duration": NONE, "warmup_updates": ZERO}
TWEAK = {"dashboard": NONE}
DASHBOARD = {"port": NONE, "request_timeout": NONE, "idle_timeout": NONE, "max_connections": NONE, "max_runs": NONE,
             "max_store_mb": NONE}
SWEEP = {**TRAINING, "samples": NONE, "sweep_seed": ZERO, "cpus_per_trial": NONE, "workers_per_trial": NONE,
         "max_concurrent": NONE, "max_retries": ZERO, "grid": NONE, "random": NONE, "config": NONE, "csv": ALL}
# A grid whose every point is refused (7 divides no batch here): checked after every option, before Ray starts.
SWEEP_GUARD = ["--grid", "minibatches=7"]
COMMANDS = {
    "experiments.breakout": ({"resume": NONE}, GUARD_DEVICE, GUARD_MESSAGE),
    "experiments.sweep": (SWEEP, SWEEP_GUARD, "--minibatches 7: expected a divisor"),
    "experiments.evaluate": (EVALUATE, ["--checkpoint", "/nonexistent/checkpoint.pt"], "--checkpoint /nonexistent/checkpoint.pt"),
    "tools/value_clip.py": (VALUE_CLIP, ["--checkpoint", "/nonexistent/checkpoint.pt"], "--checkpoint /nonexistent/checkpoint.pt"),
    "experiments.curves": (CURVES, ["--runs", "A=/nonexistent"], "--runs A=/nonexistent"),
    "tests.chaos": (CHAOS, ["--data-dir", "/proc/nonexistent/runs"], "--data-dir /proc/nonexistent/runs"),
    "experiments.benchmark": (BENCHMARK, GUARD_DEVICE, GUARD_MESSAGE),
    "experiments.tweak": (TWEAK, ["0" * 32, "learning_rate=-1"], "learning_rate=-1"),
    "experiments.dashboard": (DASHBOARD, ["--port", "0"], "--port '0'"),
}


@pytest.mark.parametrize(("module", "name", "edge", "accepted"),
                         [(module, *case) for module, (table, _, _) in COMMANDS.items() for case in _cases(table)])
def test_an_option_of_another_command_at_its_edges(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                   module: str, name: str, edge: str, accepted: bool) -> None:
    monkeypatch.chdir(tmp_path)
    _, guard, guard_text = COMMANDS[module]
    option = "--" + name.replace("_", "-")
    extra = ["--out", str(tmp_path / "out")] if module == "experiments.curves" else []
    guard = [] if option in guard else guard  # the option is the guard's own: its value alone decides
    line = _refused(module, [*extra, option, EDGES[edge], *guard], capsys)
    if accepted:
        assert guard_text in line, line
    else:
        assert f"error: {option} " in line or f"error: {option}=" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---- the values that crashed the real commands, through the real command line ---------------------------

def _grid_of(points_per_name: int, names: list[str]) -> str:
    rows = ["grid:"] + [f"  {name}: [{', '.join(str(0.001 * (i + 1)) for i in range(points_per_name))}]" for name in names]
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize(("module", "args", "expected"), [
    ("experiments.breakout", ["--torch-threads", "100000"], "error: --torch-threads 100000: expected an integer from 0 to 256"),
    ("experiments.breakout", ["--n-workers", "1000"], "error: --n-workers 1000: expected at most "),
    ("experiments.breakout", ["--total-env-steps", "99999999999999999999999999"],
     "error: --total-env-steps 99999999999999999999999999: expected an integer from 1 to 10_000_000_000_000"),
    ("experiments.breakout", ["--dashboard", "http://[::1"], "error: --dashboard http://[::1: expected an http(s) URL "),
    ("experiments.sweep", ["--config", "GRID"], "error: the sweep has 100,000,000 trials (10 "),
    ("experiments.sweep", ["--config", "SAMPLES"], "error: --config samples: 1000000000000: expected an integer from 1 to 10_000"),
])
def test_what_crashed_is_one_line_through_the_real_command(cli, tmp_path: Path, module: str, args: list[str], expected: str) -> None:
    """--torch-threads 100000 was a segfault (exit 139, no message), --n-workers 1000 a thousand processes
    on two cores, the overflow an OverflowError, the bracket a ValueError traceback; a sweep of 10^8
    grid points took 3.6 GB before its first check, and samples: 1e12 never ended."""
    names = ["learning_rate", "clip_range", "entropy_coef", "value_coef", "gamma", "gae_lambda", "max_grad_norm", "adam_eps"]
    files = {"GRID": _grid_of(10, names), "SAMPLES": "grid:\n  seed: [1, 2]\nsamples: 1000000000000\n"}
    for i, arg in enumerate(args):
        if arg in files:
            (tmp_path / f"{arg}.yaml").write_text(files[arg])
            args = [*args[:i], str(tmp_path / f"{arg}.yaml"), *args[i + 1:]]
    result = cli.run(module, *args, "--data-dir", str(tmp_path / "runs"), timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    assert not (tmp_path / "runs").exists()
    assert cli.leftovers() == []
