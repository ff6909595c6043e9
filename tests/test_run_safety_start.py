"""What a run cannot be told to do, checked before anything starts: send a git remote's credentials
into its folder, train on a device this machine lacks, press an action its game lacks, write to a
folder it cannot write, or put its folder outside the data dir."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from configs.urls import strip_userinfo
from tests import forked_run
from tests.conftest import REPO, refused_in_process
from tests.run_safety_support import refused_before_anything_started
from tests.test_experiment import TINY, summary_of

# ---- item 7: credentials in a git remote never reach the run folder -------------------------------

def test_credentials_in_the_git_remote_never_reach_the_run_folder(cli, tmp_path: Path) -> None:
    # labml records the git remotes of the project it runs in (found through .labml.yaml next to
    # the code): a copy of this project in its own repository, whose remote holds a token.
    project, secret = tmp_path / "project", "ghp_SECRETtoken1234"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for name in files:
        if (REPO / name).is_file():
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, project / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    for command in (["init", "-q"], ["remote", "add", "origin", f"https://alice:{secret}@git.example.com/team/breakout.git"],
                    ["add", "-A"], ["commit", "-qm", "copy"]):
        subprocess.run([*git, *command], cwd=project, check=True, capture_output=True)

    # Forked (tests/forked_run.py): the zygote imported none of our code, so the copy's is run.
    result = forked_run.run([sys.executable, "-m", "experiments.breakout", "--updates", "1", *TINY,
                             "--data-dir", str(tmp_path / "runs")], cwd=project, env=cli.env(), text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = Path(summary_of(result.stdout)["run_dir"])
    assert run_dir.parent.parent == tmp_path / "runs"
    info = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert info["repo_remotes"] == ["https://git.example.com/team/breakout.git"]  # recorded, without the token
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaks == [] and secret not in result.stdout + result.stderr
    assert cli.leftovers() == []


@pytest.mark.parametrize(("url", "stripped"), [
    ("https://user:token@host/repo.git", "https://host/repo.git"),
    ("https://token@host:8443/repo.git", "https://host:8443/repo.git"),
    ("http://user:p%40ss@127.0.0.1:5005/api/v1/default", "http://127.0.0.1:5005/api/v1/default"),
    ("git@github.com:org/repo.git", "github.com:org/repo.git"),
    ("https://host/repo.git", "https://host/repo.git"),
    ("/srv/git/repo.git", "/srv/git/repo.git"),
])
def test_strip_userinfo(url: str, stripped: str) -> None:
    assert strip_userinfo(url) == stripped


# ---- item 9: what the config cannot know is checked before anything starts -----------------------

@contextlib.contextmanager
def read_only_folder(path: Path) -> Iterator[Path]:
    """A folder this process cannot write: mode 0555, or for root (whom modes do not stop) a read-only mount."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"root cannot mount a read-only folder here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.parametrize("device", ["cuda", f"cuda:{torch.cuda.device_count()}"])
def test_a_device_this_machine_lacks_is_one_line_before_anything_starts(cli, tmp_path: Path, device: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA; cuda:N past the last device is tested instead")
    args = ["--device", device, "--updates", "1", *TINY, "--data-dir", str(tmp_path)]
    # One case through the real command line (its exit status, output and no process left): "cuda"
    # here, "cuda:N" on a machine with CUDA, where "cuda" is skipped.
    if device == "cuda" or torch.cuda.is_available():
        result = cli.run("experiments.breakout", *args)
        refused_before_anything_started(cli, result, f"error: --device {device}: expected ")
    else:  # the same check of the same option, made before anything starts: by main() in this process
        assert refused_in_process(capsys, args).startswith(f"error: --device {device}: expected ")
    assert list(tmp_path.iterdir()) == []


def test_a_relaunch_the_game_cannot_press_is_one_line_before_anything_starts(cli, tmp_path: Path) -> None:
    # Atlantis has FIRE but no RIGHT: without this check every worker would raise at start.
    result = cli.run("experiments.breakout", "--game", "atlantis", "--relaunch", "noop-fire-right", "--updates", "1", *TINY,
                     "--data-dir", str(tmp_path))
    refused_before_anything_started(cli, result, "error: --relaunch noop-fire-right: expected fire: Atlantis has no RIGHT action "
                                                  "(NOOP, FIRE, RIGHTFIRE, LEFTFIRE)")
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_data_dir_is_one_line_before_anything_starts(cli, tmp_path: Path) -> None:
    with read_only_folder(tmp_path / "ro") as folder:
        result = cli.run("experiments.breakout", "--updates", "1", *TINY, "--data-dir", str(folder / "runs"))
        refused_before_anything_started(cli, result, f"error: --data-dir {folder / 'runs'}: expected a folder this user can write to")


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "..", "a/b", ".hidden", ""])
def test_a_name_cannot_put_the_run_outside_the_data_dir(cli, tmp_path: Path, name: str, capsys) -> None:
    data_dir = tmp_path / "a" / "b" / "runs"
    args = ["--name", name, "--updates", "1", *TINY, "--data-dir", str(data_dir)]
    if name == "../../x":  # one through the real command line: its exit status, output and no process left
        result = cli.run("experiments.breakout", *args)
        refused_before_anything_started(cli, result, "error: --name ")
        stderr = result.stderr
    else:  # the option's own check, made before anything starts: the others in-process, as the same main()
        stderr = refused_in_process(capsys, args)
        assert stderr.startswith("error: --name "), stderr
    assert "expected a folder name" in stderr
    assert list(tmp_path.rglob("*")) == []
