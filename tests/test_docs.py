"""The documentation cannot drift from the product: the options reference holds every option `--help`
prints, the README keeps its promises (short, set-up and tests first, CI runs exactly its commands),
the site builds in strict mode, and the compact run records still give the published tables."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from configs.ppo import PPOConfig

REPO = Path(__file__).resolve().parent.parent


def reference_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("options_reference", REPO / "docs" / "options_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered_reference() -> str:
    return reference_module().render((REPO / "docs" / "reference.md").read_text())


def test_every_option_of_help_is_in_the_generated_reference() -> None:
    help_text = subprocess.run([sys.executable, "-m", "experiments.breakout", "--help"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-h)\b", help_text))
    assert {"--learning-rate", "--resume", "--version", "-h", "--value-clip-range"} <= options  # the parse sees them
    reference = rendered_reference()
    missing = sorted(o for o in options if f"`{o}`" not in reference and f"`{o} " not in reference)  # `--seed INT`
    assert not missing, f"options in --help but not in docs/reference.md: {missing}"


def test_each_option_s_definition_carries_default_range_and_kind() -> None:
    reference = rendered_reference()
    assert reference_module().MARKER not in reference
    # Each option: its term (the option as typed), what it does, then its facts on a line of their own.
    entries = {m[1]: (m[2], m[3]) for m in re.finditer(r"^`(--[a-z-]+) [^`]*`\n:   (.*)\n\n    (.*)$", reference, re.M)}
    facts = {option: entry[1] for option, entry in entries.items()}
    # Worked out from configs/ppo.py by hand: learning_rate defaults to 2.5e-4 and is live in [0, 1e-2];
    # epochs is a positive integer, live in [1, 32]; device is a run option; target_kl has no default
    # (none: never) and is positive; frame_skip is an integer from 1 to 64.
    assert facts["--learning-rate"] == "default: `0.00025` · accepts a number ≥ 0 · **live**, 0 to 0.01"
    assert facts["--epochs"] == "default: `4` · accepts an integer > 0 · **live**, 1 to 32"
    assert facts["--device"] == "default: `auto` · run option: may change on `--resume`"
    assert facts["--target-kl"] == "default: none, never · accepts a number > 0, or `none`"
    assert facts["--frame-skip"] == "default: `4` · accepts an integer from 1 to 64"
    assert facts["--clip-rewards"] == "default: `true` · accepts `true` or `false`"
    assert entries["--target-kl"][0] == "stop the epochs early once approximate KL exceeds this"
    # One definition per field, each under the section --help puts it in.
    assert len(entries) == len(dataclasses.fields(PPOConfig))
    assert reference.index("`--game") < reference.index("### Batch and schedule") < reference.index("`--n-workers")


def test_readme_is_a_short_guide_and_ci_runs_its_commands() -> None:
    readme = (REPO / "README.md").read_text().splitlines()
    assert len(readme) <= 250
    assert len(re.findall(r"\b20\d\d-\d\d-\d\d\b", "\n".join(readme))) <= 3
    assert "p = " not in "\n".join(readme) and "p-value" not in "\n".join(readme)
    first = readme[:40]
    setup = ["python3 -m venv .venv && . .venv/bin/activate", 'pip install torch==2.13.0 && pip install -e ".[dev,ray,compare]"']
    for line in [*setup, "python -m pytest"]:
        assert line in first, f"README's first 40 lines lack: {line}"
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith(("#", " "))]
    commands = ci[ci.index(setup[0]):]
    assert commands == [*setup, "mkdocs build --strict", "python -m pytest"]
    assert all(line in readme or f"`{line}`" in "\n".join(readme) for line in commands)


def test_the_readme_s_commands_table_is_the_dispatcher_s_list() -> None:
    """A command stays only if the README says why a user runs it: its table and `breakout-ppo`'s
    commands name the same commands, each with the module `python -m` runs."""
    from experiments.commands import COMMANDS

    rows = re.findall(r"^\| `([a-z-]+)` \| `(experiments\.[a-z_0-9.]+)` \| (.+) \|$", (REPO / "README.md").read_text(), re.M)
    assert {name: module for name, module, _ in rows} == {name: c.module for name, c in COMMANDS.items()}
    assert all(len(why) > 20 for _, _, why in rows)


def test_no_text_file_holds_a_merge_conflict_left_unresolved() -> None:
    # One did (docs/architecture.md, both sides of a table row): a strict site build renders the
    # markers as text, and Python's parser sees only the .py files.
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    texts = [REPO / name for name in tracked if name.endswith((".md", ".py", ".toml", ".yml", ".js", ".css", ".html", ".json", ".cfg"))]
    marked = [f"{path.relative_to(REPO)}:{number}" for path in texts if path.is_file()
              for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
              if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "======="]
    assert marked == []


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    if shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e .[dev])")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert "<dt><code>--learning-rate FLOAT</code></dt>" in page and "<!-- options-reference -->" not in page


def test_the_archived_records_give_the_published_table(tmp_path: Path) -> None:
    # README and docs/results.md: the defaults 20.1 ± 2.5 and the peer 19.8 ± 1.6 at 1M, drawn from three
    # archives by the command they print (their paths moved under tmp_path).
    for study in ("value-clip-0.5-intel", "value-clip-price-intel-1M", "peer-sb3-zoo-intel-1M"):
        with tarfile.open(REPO / "docs" / "runs" / f"{study}.tar.xz") as archive:
            archive.extractall(tmp_path, filter="data")  # no links out, no absolute paths
    out = tmp_path / "curves"
    subprocess.run([sys.executable, "-m", "experiments.curves", "--runs", f"the defaults={tmp_path / 'value-clip-0.5-intel'}",
                    "--runs", f"SB3 rl-zoo PPO={tmp_path / 'value-clip-price-intel-1M' / 'peer-sb3-zoo'}",
                    "--runs", f"SB3 rl-zoo PPO={tmp_path / 'peer-sb3-zoo-intel-1M'}",
                    "--budgets", "250000", "500000", "1000000", "--out", str(out)], cwd=REPO, capture_output=True, check=True)
    table = (out / "table.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| 1,000,000 |"))
    assert "**20.1** ± 2.5" in row and "**19.8** ± 1.6" in row
    row = next(line for line in table.splitlines() if line.startswith("| 500,000 |"))
    assert "**15.5** ± 2.1" in row and "**15.4** ± 1.9" in row
