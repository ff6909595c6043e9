"""The import graph points one way. Read from the source (every import statement, those inside
functions too), so a shortcut added anywhere fails here rather than in a reviewer's head."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = {"configs", "ray_setup", "game", "ppo", "dashboard", "experiments"}

# What each package may import of ours (itself always). Third-party rules ride along: the env
# workers (game/) and the settings (configs/) never load torch.
ALLOWED = {
    "configs": set(),
    "ray_setup": set(),  # starting, joining and watching Ray: below the games whose actors use it
    "game": {"ray_setup"},
    "ppo": {"configs", "game"},
    "dashboard": {"configs"},  # an app of its own: nothing of the learner
    "experiments": {"configs", "ray_setup", "game", "ppo", "dashboard"},
}
FORBIDDEN_THIRD_PARTY = {"configs": {"torch", "gymnasium", "ale_py"}, "ray_setup": {"torch", "gymnasium", "ale_py"},
                         "game": {"torch"}}


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (absolute imports; relative ones stay inside)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def import_graph() -> dict[str, set[str]]:
    """package → the packages its modules import (ours and third-party)."""
    graph: dict[str, set[str]] = {}
    for package in ALLOWED:
        for path in (REPO / package).rglob("*.py"):
            graph.setdefault(package, set()).update(imported_packages(path))
    return graph


# The training process: what `python -m experiments.breakout` (and a sweep trial) runs. It reaches
# the dashboard over HTTP only, through labml, and labml through experiments/run/labml/ alone.
TRAINING_SIDE = ["configs", "game", "ppo", "experiments/breakout.py", "experiments/run"]
LABML_SEAM = REPO / "experiments" / "run" / "labml"


def training_side_modules() -> list[Path]:
    paths = [REPO / place for place in TRAINING_SIDE]
    return sorted(p for path in paths for p in ([path] if path.suffix == ".py" else path.rglob("*.py")))


def test_the_training_process_imports_nothing_of_the_dashboard() -> None:
    offenders = [str(path.relative_to(REPO)) for path in training_side_modules() if "dashboard" in imported_packages(path)]
    assert offenders == []


def test_the_training_process_touches_labml_in_one_folder() -> None:
    offenders = [str(path.relative_to(REPO)) for path in training_side_modules()
                 if "labml" in imported_packages(path) and LABML_SEAM not in path.parents]
    assert offenders == []
    assert any("labml" in imported_packages(path) for path in LABML_SEAM.glob("*.py"))  # the check sees labml's imports


def test_the_labml_folder_is_below_the_run_it_serves() -> None:
    """experiments/run/labml/ is what the run calls to reach labml: it is given what it needs
    (a resumed run's history, where to say things) and imports nothing of the run above it."""
    seam = "experiments.run.labml"
    above = {module: sorted(i for i in imported if not i.startswith(seam))
             for module, imported in module_imports(REPO, ["experiments"]).items() if module.startswith(seam)}
    assert len(above) > 3 and all(v == [] for v in above.values()), above


def test_imported_packages_reads_every_kind_of_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os, game.atari\nfrom ppo.model import X\nfrom . import sibling\n\ndef f():\n    import torch\n")
    assert imported_packages(module) == {"os", "game", "ppo", "torch"}


def module_imports(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """module → the modules of `packages` it imports, at any depth of its code (function-level too)."""
    paths = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for package in packages for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                named |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        graph[module] = (named & paths.keys()) - {module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle found by walking the graph depth first: [a, b, …, a]."""
    state: dict[str, bool] = {}  # False: on the walk's path; True: done
    circles: list[list[str]] = []

    def walk(module: str, path: list[str]) -> None:
        state[module] = False
        for imported in sorted(graph[module]):
            if state.get(imported) is False:
                circles.append([*path[path.index(imported):], module, imported])
            elif imported not in state:
                walk(imported, [*path, module])
        state[module] = True

    for module in sorted(graph):
        if module not in state:
            walk(module, [])
    return circles


def test_no_module_imports_itself_back() -> None:
    """A circle works only while an import stays inside a function, in the right order; none at all."""
    assert import_circles(module_imports(REPO, ALLOWED)) == []


def test_a_circle_through_a_function_level_import_is_seen(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "__init__.py").write_text("")
    (tmp_path / "a" / "x.py").write_text("from a.y import f\n")
    (tmp_path / "a" / "y.py").write_text("from a import z\n")
    (tmp_path / "a" / "z.py").write_text("def g():\n    from a.x import f\n")
    assert import_circles(module_imports(tmp_path, ["a"])) == [["a.x", "a.y", "a.z", "a.x"]]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_one_way(package: str) -> None:
    imported = import_graph()[package]
    assert (imported & OURS) - {package} <= ALLOWED[package], f"{package}/ imports {sorted((imported & OURS) - {package} - ALLOWED[package])}"
    assert not imported & FORBIDDEN_THIRD_PARTY.get(package, set()), f"{package}/ imports {sorted(imported & FORBIDDEN_THIRD_PARTY[package])}"


def test_a_run_that_films_nothing_never_loads_the_video_encoder_nor_a_member_the_dashboard() -> None:
    """PyAV brings FFmpeg's libraries (about 20 MB of the trainer's memory): the training and
    evaluation commands load it only when a game is filmed (ppo/evaluation/__init__.py). A
    population's member is a Ray task of experiments/pbt/population.py that runs a training run:
    its process loads that module, its package and the run's, and nothing of the dashboard."""
    import subprocess
    import sys
    dashboard = "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dashboard') or 'none')"
    probe = ("import sys, experiments.pbt.population, experiments.breakout, experiments.run.lifecycle, "
             f"experiments.run.plan, experiments.run.folders; {dashboard}; "
             "import experiments.evaluate, ppo.evaluation; print('av' in sys.modules, 'ppo.evaluation.film' in sys.modules); "
             f"import experiments.pbt.cli; {dashboard}")
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == ["none", "False", "False", "['dashboard',", "'dashboard.client']"]  # the driver's: seen
    filmed = subprocess.run([sys.executable, "-c", "import sys, ppo.evaluation.film; print('av' in sys.modules)"],
                            cwd=REPO, capture_output=True, text=True, check=True)
    assert filmed.stdout.split() == ["True"]  # the probe can see the import it looks for


def test_the_training_command_reads_its_command_line_before_it_loads_the_learner(tmp_path: Path) -> None:
    """`--help`, `--version` and a refused option come from configs/ alone: torch and labml are
    imported by experiments/breakout.py's main only once the command line is accepted."""
    import subprocess
    import sys
    probe = ("import sys\nfrom experiments.breakout import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    print(e.code, 'torch' in sys.modules, 'labml' in sys.modules)")
    for argv, code in ((["--help"], "0"), (["--epochs", "0"], "2")):
        answer = subprocess.run([sys.executable, "-c", probe, *argv], cwd=REPO, capture_output=True, text=True, check=True)
        assert answer.stdout.split()[-3:] == [code, "False", "False"], (argv, answer.stdout[-500:], answer.stderr[-500:])
    # A resume of a run that is not there is refused before torch loads too.
    missing = subprocess.run([sys.executable, "-c", probe, "--resume", "f" * 32, "--data-dir", str(tmp_path)],
                             cwd=REPO, capture_output=True, text=True, check=True)
    assert missing.stdout.split()[-3:] == ["2", "False", "False"], missing.stderr[-500:]
    # An accepted command line loads torch (the probe sees it): here its device is checked, and its
    # data dir found to be a file; labml only once the run starts (experiments/run/labml/).
    (not_a_folder := tmp_path / "file").write_text("")
    accepted = subprocess.run([sys.executable, "-c", probe, "--data-dir", str(not_a_folder)],
                              cwd=REPO, capture_output=True, text=True, check=True)
    assert accepted.stdout.split()[-3:] == ["2", "True", "False"], accepted.stderr[-500:]


def test_names_configs_must_spell_again_stay_equal() -> None:
    """configs imports nothing of ours, so the names it checks a config against that game/ owns
    are spelled there a second time; this keeps each pair equal."""
    import configs.fields
    import game.atari
    import game.vector
    assert configs.fields.BACKENDS == game.vector.BACKENDS
    assert configs.fields.RELAUNCHES == game.atari.RELAUNCHES


def test_the_game_settings_default_as_the_config_does() -> None:
    """game/ cannot read PPOConfig, so `GameSpec` (what a worker builds a game from) keeps defaults of
    its own for tests and tools that build one game; a run always passes the config's values
    (`GameSpec.from_settings`). This keeps the two sets of defaults one."""
    import dataclasses

    from configs.ppo import PPOConfig
    from game.atari import GameSpec
    spec, config = GameSpec().to_dict(), PPOConfig().to_dict()
    shared = sorted((spec.keys() & config.keys()) - {"seed"})  # a game's seed is derived from the run's
    assert shared == sorted(f.name for f in dataclasses.fields(GameSpec) if f.name != "seed")
    assert {k: spec[k] for k in shared} == {k: config[k] for k in shared}


@pytest.mark.parametrize("script", ["probe_run.py", "short_run.py"])
def test_the_dashboard_tests_probes_are_plain_labml_experiments(script: str) -> None:
    """tests/dashboard/probe_run.py and short_run.py stand for any labml experiment (labml_nn's PPO,
    say) in the dashboard's tests, live changes included: at module level they import labml and
    nothing of ours."""
    tree = ast.parse((REPO / "tests" / "dashboard" / script).read_text())
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.add(node.module.split(".")[0])
    assert "labml" in top and not top & OURS, sorted(top)
