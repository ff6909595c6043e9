"""The command line as a user meets it: --help, --version, misspelt options, game names, and the
`breakout-ppo` / `python -m experiments` dispatcher. Through the real commands in subprocesses,
with in-process checks only where a value has to be looked at inside."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from configs.cli import parse_config
from configs.fields import PRECISIONS
from configs.ppo import FIELDS, SECTIONS
from configs.version import VERSION
from experiments.commands import COMMANDS
from game.atari import canonical_game
from ppo.checkpoint import load_checkpoint
from tests.conftest import REPO
from tests.test_experiment import summary_of

ENTRY_POINTS = ["breakout", "evaluate", "dashboard", "tweak", "benchmark", "sweep", "curves", "peer_sb3"]
UNDERSCORED = [f.name for f in FIELDS if "_" in f.name]

# `python -m MODULE ARGS` with torch, Ray and labml made unimportable: each attempt to import one
# is refused (ImportError) and recorded, so that one hidden behind a `try` is seen too. What the
# command answered goes to stdout and stderr as usual; the exit code and the attempts to $PROBE_OUT.
PROBE = """
import json, os, runpy, sys
HEAVY, attempted = ("torch", "ray", "labml"), []
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HEAVY:
            attempted.append(name)
            raise ImportError(f"{name} imported while answering the command line")
        return None
sys.meta_path.insert(0, Refuse())
module, sys.argv = sys.argv[1], sys.argv[1:]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as e:
    code = e.code
with open(os.environ["PROBE_OUT"], "w") as out:
    json.dump({"code": code, "attempted": attempted, "loaded": [m for m in HEAVY if m in sys.modules]}, out)
"""

# One refused option of every command, each the line it must print (worked out from the option's range).
REFUSALS = {
    "train": (["--epochs", "0"], "error: --epochs 0: expected a number > 0"),
    "evaluate": (["--games", "0"], "error: --games 0: expected an integer from 1 to 100_000"),
    "dashboard": (["--port", "http"], "error: --port 'http': expected an integer from 1 to 65535"),
    "tweak": (["abc"], "error: RUN_UUID 'abc': expected the uuid of a run (32 hex digits, as labml prints it), or the "
                       "first 8 or more of them where one run under --data-dir runs begins so"),
    "benchmark": (["--duration", "0"], "error: --duration 0: expected a number > 0 and ≤ 3600"),
    "curves": (["--window", "0"], "error: --window 0: expected an integer from 1 to 100_000"),
    "peer": (["--seed", "-1"], "error: --seed -1: expected an integer from 0 to 4_294_967_295"),
    "sweep": (["--samples", "0"], "error: --samples 0: expected an integer from 1 to 10_000"),
    "pbt": (["--population", "1"], "error: --population 1: expected an integer from 2 to 1_024"),
}


def probed(tmp_path: Path, module: str, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "probe.json"
    out.unlink(missing_ok=True)
    result = subprocess.run([sys.executable, "-c", PROBE, module, *args], cwd=REPO, capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, PROBE_OUT=str(out)))
    assert out.exists(), result.stderr[-3000:]  # the probe itself ran to its end
    return result, json.loads(out.read_text())


def test_the_commands_are_all_probed() -> None:
    assert sorted(REFUSALS) == sorted(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_and_a_refusal_answer_without_torch_ray_or_labml(command: str, tmp_path: Path) -> None:
    """Every command: --help, through the dispatcher and its own module (each imports the module its
    own way), then one bad option, each answered with the heavy libraries unimportable (a command
    that reached for one fails here)."""
    for module, args in (("experiments", [command]), (COMMANDS[command].module, [])):
        helped, probe = probed(tmp_path, module, *args, "--help")
        assert probe == {"code": 0, "attempted": [], "loaded": []}, (module, probe, helped.stderr[-2000:])
        assert helped.stdout.startswith("usage: ") and helped.stderr == ""
    option, line = REFUSALS[command]
    refused, probe = probed(tmp_path, "experiments", command, *option)
    assert probe == {"code": 2, "attempted": [], "loaded": []}, (probe, refused.stderr[-2000:])
    assert refused.stdout == "" and refused.stderr == line + "\n", refused.stderr


def test_the_dispatcher_and_the_sb3_peer_answer_without_torch_ray_or_labml(tmp_path: Path) -> None:
    for args in (["--help"], ["--version"]):
        result, probe = probed(tmp_path, "experiments", *args)
        assert probe == {"code": 0, "attempted": [], "loaded": []} and result.stdout, result.stderr
    result, probe = probed(tmp_path, "experiments", "trian")
    assert probe == {"code": 2, "attempted": [], "loaded": []}
    assert result.stderr == f"error: COMMAND trian: expected one of {', '.join(COMMANDS)}\n"
    _, probe = probed(tmp_path, "experiments.peer_sb3", "--help")
    assert probe == {"code": 0, "attempted": [], "loaded": []}
    result, probe = probed(tmp_path, "experiments.peer_sb3", "--seed", "x", "--run-dir", str(tmp_path))
    assert probe == {"code": 2, "attempted": [], "loaded": []}
    assert result.stderr == "error: --seed x: expected an integer from 0 to 4_294_967_295\n"


def test_the_probe_sees_an_import_of_torch(tmp_path: Path) -> None:
    """The check above can fail: a module that imports torch at its top is caught."""
    (tmp_path / "loads_torch.py").write_text("import torch\n")
    env = dict(os.environ, PROBE_OUT=str(tmp_path / "probe.json"), PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    result = subprocess.run([sys.executable, "-c", PROBE, "loads_torch"], cwd=REPO, capture_output=True, text=True, env=env)
    assert result.returncode != 0 and "torch imported while answering the command line" in result.stderr


@pytest.mark.parametrize(("args", "line"), [
    # argparse's own refusals, in the shape of every other: OPTION VALUE: expected …
    (["curves", "--peer", "x"], "error: --peer x: expected one of none, sb3"),
    (["pbt", "--interval", "x"], f"error: --interval x: expected an integer from 1 to {10**9:_}"),
    (["evaluate", "--games"], "error: --games: expected a value after it"),
    (["evaluate", "--greedy", "--sample"], "error: --sample: expected either --greedy or --sample, not both"),
    (["tweak", "--dashboard", "http://127.0.0.1:5005"], "error: RUN_UUID, NAME=VALUE: expected a value, none given"),
    # the dashboard's and tweak's own checks: no program name before `error:` any more
    (["dashboard", "--host", "my host"], "error: --host 'my host': expected localhost or a numeric IP address such as 127.0.0.1"),
    (["tweak", "f" * 32, "--dashboard", "ftp://x"], "error: --dashboard 'ftp://x': expected a URL such as http://127.0.0.1:5005"),
])
def test_every_command_refuses_in_one_shape(args: list[str], line: str, tmp_path: Path) -> None:
    result, probe = probed(tmp_path, "experiments", *args)
    assert probe["code"] == 2 and result.stdout == "" and result.stderr == line + "\n", result.stderr


def option_entries(help_text: str) -> dict[str, str]:
    """`--name` → its whole entry in --help (the option line and its wrapped help), one line."""
    entries: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        if match := re.match(r"  (--[a-z][a-z0-9-]*)", line):
            current = match.group(1)
            entries[current] = line.strip()
        elif current and line.startswith("   "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


def test_training_help_shows_each_option_once_with_a_typed_placeholder(cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # the line count below is for an 80-column terminal
    result = cli.run("experiments.breakout", "--help")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    # Before: 203 lines (a 48-line usage, most options twice, every placeholder VALUE); after, under
    # 160, 164 once --relaunch came, and 176 once every number showed its range.
    assert len(lines) < 185, len(lines)
    assert lines[0] == "usage: python -m experiments.breakout [-h] [--version] [--OPTION VALUE ...]"
    entries = option_entries(result.stdout)
    for f in FIELDS:
        dashed = "--" + f.name.replace("_", "-")
        assert len(re.findall(rf"^  {dashed}\b(?!-)", result.stdout, re.M)) == 1, dashed
    for name in UNDERSCORED:  # still accepted (below), never shown
        assert f"--{name}" not in result.stdout
    assert "VALUE" not in "".join(entries.values())
    for option, placeholder in [("--seed", "INT"), ("--learning-rate", "FLOAT"), ("--clip-rewards", "{true,false}"),
                                ("--precision", "ARITHMETIC"), ("--backend", "{local,ray,serial}"),
                                ("--game", "GAME"), ("--data-dir", "DIR"), ("--dashboard", "URL")]:
        assert entries[option].startswith(f"{option} {placeholder} "), entries[option]
    # The five arithmetics are too wide for braces on a phone's reference page; the help names each.
    assert all(re.search(rf"\b{re.escape(name)}\b", entries["--precision"]) for name in PRECISIONS), entries["--precision"]


def test_training_help_names_each_default_once_as_it_is_typed(cli) -> None:
    help_text = cli.run("experiments.breakout", "--help").stdout
    entries = option_entries(help_text)
    assert "(default: None)" not in help_text and "None" not in help_text
    for option, entry in entries.items():
        assert entry.count("(default") <= 1, entry
        assert option in ("--help", "--version", "--resume") or "(default: " in entry, entry
    assert entries["--clip-rewards"].endswith("(default: true)")
    assert entries["--skip-nonfinite"].endswith("(default: false)")
    assert entries["--n-workers"].endswith("(default: 8)")
    assert entries["--target-kl"].endswith("(default: none, never)")
    assert entries["--updates"].endswith("(default: derived, total_env_steps // batch_size)")
    # Sections from configs.ppo.SECTIONS, in that order.
    headings = [line[:-1] for line in help_text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings[1:] == list(SECTIONS)  # after argparse's own "options" ("optional arguments" before 3.10)


def test_every_field_is_in_exactly_one_help_section() -> None:
    listed = [name for names in SECTIONS.values() for name in names]
    assert sorted(listed) == sorted(f.name for f in FIELDS)


def test_a_misspelt_option_is_one_line_with_a_suggestion(cli) -> None:
    result = cli.run("experiments.breakout", "--lr", "1e-3")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "error: unrecognized arguments: --lr 1e-3; did you mean --learning-rate?\n"
    assert cli.leftovers() == []


@pytest.mark.parametrize("typed, meant", [
    ("--learning-rat", "--learning-rate"),  # the nearest by letters
    ("--ent-coef", "--entropy-coef"),  # what SB3 calls it
    ("--n_worker", "--n-workers"),
    ("--lr=1e-3", "--learning-rate"),
])
def test_suggestions(typed: str, meant: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_config([typed, "1"], "prog", "description")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith(f"; did you mean {meant}?"), err


def test_nothing_is_suggested_when_nothing_is_near(capsys) -> None:
    with pytest.raises(SystemExit):
        parse_config(["--zzzz"], "prog", "description")
    assert capsys.readouterr().err == "error: unrecognized arguments: --zzzz\n"


def test_underscore_spellings_are_still_accepted(cli) -> None:
    config, _, overrides = parse_config(["--learning_rate", "1e-3", "--n_workers=2", "--anneal_clip_range", "no"], "prog", "d")
    assert (config.learning_rate, config.n_workers, config.anneal_clip_range) == (1e-3, 2, False)
    assert overrides == {"learning_rate": 1e-3, "n_workers": 2, "anneal_clip_range": False}
    # Through the real command: the underscore option is taken, and the check after it speaks.
    result = cli.run("experiments.breakout", "--learning_rate", "1e-3", "--minibatches", "3")
    assert result.returncode == 2
    assert result.stderr.startswith("error: --minibatches 3: expected a divisor of the batch size 1024"), result.stderr


def test_game_names_are_case_insensitive(cli) -> None:
    assert (canonical_game("pong"), canonical_game("BREAKOUT"), canonical_game("ale/pong-v5")) == ("Pong", "Breakout", "ALE/Pong-v5")
    assert canonical_game("pongg") is None
    config, _, overrides = parse_config(["--game", "pong"], "prog", "d", canonical_game=canonical_game)
    assert config.game == "Pong" and overrides["game"] == "Pong"  # what the checkpoint and a --resume compare
    # The real command takes it (the batch check after the game's speaks) and still refuses a non-game.
    taken = cli.run("experiments.breakout", "--game", "pong", "--minibatches", "3")
    assert taken.returncode == 2 and taken.stderr.startswith("error: --minibatches 3:"), taken.stderr
    refused = cli.run("experiments.breakout", "--game", "pongg", "--minibatches", "3")
    assert refused.returncode == 2 and refused.stderr.startswith("error: --game pongg: expected an ALE game"), refused.stderr


@pytest.mark.slow
def test_a_run_given_a_lowercase_game_records_the_canonical_name(cli, tmp_path: Path) -> None:
    result = cli.run("experiments", "train", "--game", "pong", "--updates", "1", "--n-workers", "2", "--worker-steps", "16",
                     "--minibatches", "2", "--epochs", "1", "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = summary_of(result.stdout)
    assert load_checkpoint(Path(summary["checkpoint"]))["config"]["game"] == "Pong"
    assert Path(summary["run_dir"]).parent == tmp_path / "breakout"  # the run's folder is named by --name, never the game
    assert cli.leftovers() == []


@pytest.mark.parametrize("module", [*ENTRY_POINTS, "experiments"])
def test_every_entry_point_has_version_and_names_itself_in_usage(cli, module: str) -> None:
    module = module if module == "experiments" else f"experiments.{module}"
    version = cli.run(module, "--version")
    assert version.returncode == 0 and version.stdout == f"breakout-ppo {VERSION}\n", version
    usage = cli.run(module, "--help")
    assert usage.returncode == 0 and usage.stdout.startswith(f"usage: python -m {module} ["), usage.stdout[:200]
    assert "--version" in usage.stdout


def test_the_dispatcher_lists_its_commands_and_forwards_their_arguments(cli) -> None:
    listing = cli.run("experiments", "--help")
    assert listing.returncode == 0
    for name, command in COMMANDS.items():
        assert re.search(rf"^  {name} +{re.escape(command.summary)}$", listing.stdout, re.M), name
    # A command's own help, under the dispatcher's name for it.
    train_help = cli.run("experiments", "train", "--help")
    assert train_help.stdout.startswith("usage: python -m experiments train [-h] [--version] [--OPTION VALUE ...]")
    # Its arguments reach the command: the same one-line refusal as `python -m experiments.breakout`.
    bad = cli.run("experiments", "train", "--worker-steps", "-5")
    assert bad.returncode == 2 and bad.stderr == "error: --worker-steps -5: expected an integer from 1 to 100_000\n"
    named = cli.run("experiments", "dashboard", "--port", "http")
    assert named.returncode == 2
    assert named.stderr == "error: --port 'http': expected an integer from 1 to 65535\n"
    unknown = cli.run("experiments", "trian")
    assert unknown.returncode == 2 and unknown.stderr == f"error: COMMAND trian: expected one of {', '.join(COMMANDS)}\n"
    assert cli.leftovers() == []


def test_the_console_script(cli) -> None:
    """`breakout-ppo`, as `pip install -e .` puts it beside the interpreter (CI installs it)."""
    script = Path(sys.executable).parent / "breakout-ppo"
    assert script.is_file(), f"{script} is missing: `pip install -e .` installs the console script"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *args], cwd=REPO, env=cli.env(), capture_output=True, text=True, timeout=300)

    assert run("--version").stdout == f"breakout-ppo {VERSION}\n"
    assert all(f"\n  {name} " in run("--help").stdout for name in COMMANDS)
    train_help = run("train", "--help")
    assert train_help.returncode == 0 and train_help.stdout.startswith("usage: breakout-ppo train [-h]")
    tweak = run("tweak", "--help")
    assert tweak.returncode == 0 and tweak.stdout.startswith("usage: breakout-ppo tweak [-h]")


def test_a_run_named_by_its_first_digits_or_without_a_checkpoint_is_answered_before_torch(tmp_path: Path) -> None:
    """The 8-character id the dashboard shows names a run wherever a run is named when one run
    begins so, and several that begin so are listed in one line; a run with no checkpoint is refused
    by `--resume` and `evaluate` before torch is loaded (seconds sooner)."""
    data = tmp_path / "runs"
    lost, twin_a, twin_b = "0123abcd" + "e" * 24, "4567abcd" + "a" * 24, "4567abcd" + "b" * 24
    for uuid in (lost, twin_a, twin_b):
        (data / "breakout" / uuid).mkdir(parents=True)
    both = f"2 runs under {data}/ begin so: breakout/{twin_a}, breakout/{twin_b}"
    for args, line in (
            (["train", "--resume", lost[:8], "--data-dir", str(data)],
             f"error: --resume {lost[:8]}: expected a run with a checkpoint to resume from ({data / 'breakout' / lost} has none: "
             "it stopped before its first checkpoint, so there is nothing to go on from)"),
            (["evaluate", "--run", lost[:8], "--data-dir", str(data)],
             f"error: --run {lost[:8]}: expected a readable checkpoint written by python -m experiments.breakout (no checkpoint "
             f"at {data / 'breakout' / lost / 'checkpoints' / 'checkpoint.pt'})"),
            (["train", "--resume", "4567abcd", "--data-dir", str(data)], f"error: --resume 4567abcd: expected the id of one run; {both}"),
            (["evaluate", "--run", "4567abcd", "--data-dir", str(data)], f"error: --run 4567abcd: expected the id of one run; {both}"),
            (["tweak", "4567abcd", "--data-dir", str(data)], f"error: RUN_UUID 4567abcd: expected the id of one run; {both}")):
        refused, probe = probed(tmp_path, "experiments", *args)
        assert probe == {"code": 2, "attempted": [], "loaded": []}, (args, probe, refused.stderr[-2000:])
        assert refused.stdout == "" and refused.stderr == line + "\n", refused.stderr
