"""Nobody outside can steer, break or hijack a run: each attack or fault reproduced for real.

Live values outside their ranges, a stop in the middle of an update, a poisoned or truncated
checkpoint, credentials in a git remote, a device or folder that cannot work, a name that climbs
out of the data dir, a resume that would report to a dashboard nobody asked for, and file modes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
import yaml

from configs.ppo import PPOConfig
from configs.urls import strip_userinfo
from experiments.run.folders import checkpoint_paths, file_mode
from experiments.run.games_csv import read_games
from experiments.run.updates_csv import read_updates
from game.vector import PipePool, game_specs
from ppo.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from ppo.seeding import derive_seeds
from ppo.trainer import IterationSettings, Trainer, UpdateAbandoned
from tests.conftest import REPO, Cli, refused_in_process, run_once
from tests.test_experiment import TINY, summary_of

PER_UPDATE = 2 * 16  # agent steps of one TINY update


@pytest.fixture
def trainer() -> Iterator[Trainer]:
    config = PPOConfig(n_workers=2, worker_steps=16, minibatches=2, epochs=2)
    seeds = derive_seeds(config.seed, config.n_envs)
    with PipePool(game_specs(config, seeds.env_seeds)) as pool:
        pool.reset()
        yield Trainer(config, pool, seeds, torch.device("cpu"))


# ---- item 5: live values are checked by the trainer itself ---------------------------------------

def test_out_of_range_live_values_are_refused_and_logged_once(trainer: Trainer) -> None:
    sent = {"learning_rate": 1e-4, "clip_range": 0.2, "entropy_coef": 0.01, "value_coef": 0.5, "epochs": 3}
    trainer.live_values = lambda: dict(sent)
    events: list[str] = []
    trainer.on_event = events.append
    good = trainer.schedule()
    assert (good.learning_rate, good.epochs) == (1e-4, 3) and events == []

    # What a widened dashboard range let through: each refused, the last good value kept.
    sent.update(learning_rate=-0.01, epochs=1_000_000, clip_range=float("nan"), value_coef="5")
    settings = trainer.schedule()
    assert (settings.learning_rate, settings.epochs, settings.clip_range, settings.value_coef) == (1e-4, 3, 0.2, 0.5)
    assert sorted(events) == [
        "refused live value clip_range = nan: expected a finite number; keeping 0.2",
        "refused live value epochs = 1000000: expected a value in [1, 32]; keeping 3",
        "refused live value learning_rate = -0.01: expected a value in [0, 0.01]; keeping 0.0001",
        "refused live value value_coef = '5': expected a number; keeping 0.5",
    ]
    trainer.schedule()
    assert len(events) == 4  # one line per refused value, not one per update
    assert trainer.live_in_use == {"learning_rate": 1e-4, "clip_range": 0.2, "entropy_coef": 0.01, "value_coef": 0.5, "epochs": 3}

    sent.update(learning_rate=2e-4)  # a good value is applied again at once
    assert trainer.schedule().learning_rate == 2e-4


def test_settings_outside_the_ranges_never_touch_the_model(trainer: Trainer) -> None:
    trainer.collect()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    bad = IterationSettings(learning_rate=-0.01, clip_range=0.1, value_clip_range=0.1, value_coef=0.5, entropy_coef=0.01, epochs=2)
    with pytest.raises(ValueError, match=r"learning_rate = -0.01: expected a value in \[0, 0.01\]"):
        trainer.optimize(bad)
    assert all(torch.equal(p, q) for p, q in zip(trainer.model.parameters(), before, strict=True))


def test_a_stop_between_minibatches_rolls_the_update_back(trainer: Trainer) -> None:
    trainer.iteration()  # Adam has state: the rollback must restore it too
    trainer.collect()
    model_before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    adam_before = {k: v.clone() for k, v in trainer.optimizer.state_dict()["state"][0].items()}
    shuffle_before = trainer.shuffle_rng.bit_generator.state  # a new dict each time it is read
    asked = []

    def stop_at_the_third_minibatch() -> bool:  # in epoch 2 of 2: half the update already applied
        asked.append(True)
        return len(asked) == 3

    trainer.should_stop = stop_at_the_third_minibatch
    with pytest.raises(UpdateAbandoned, match="stop requested during update 2"):
        trainer.optimize(trainer.schedule())
    assert len(asked) == 3 and trainer.update == 1
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(tensor, model_before[name]), name
    for name, tensor in trainer.optimizer.state_dict()["state"][0].items():
        assert torch.equal(tensor, adam_before[name]), name
    assert trainer.shuffle_rng.bit_generator.state == shuffle_before  # the abandoned epochs drew no order


STOP_MID_UPDATE = """
import os, signal, sys
from ppo.trainer import Trainer
original_update, original_collect, seen = Trainer._minibatch_update, Trainer._collect_once, []
def update_then_sigterm(self, minibatch, settings):
    if self.update == 2:  # update 3: a real SIGTERM to the trainer right after its second minibatch of four
        seen.append(1)
        if len(seen) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
    return original_update(self, minibatch, settings)
def sigterm_to_the_group_then_collect(self):
    if self.update == 2 and not seen:  # update 3: SIGTERM to every process of the run, as `timeout`,
        seen.append(1)                 # systemd or SLURM send it, while the workers are in use
        os.killpg(os.getpgid(0), signal.SIGTERM)
    return original_collect(self)
if os.environ["SIGTERM_TO"] == "group":
    Trainer._collect_once = sigterm_to_the_group_then_collect
else:
    Trainer._minibatch_update = update_then_sigterm
from experiments.breakout import main
sys.exit(main(sys.argv[1:]))
"""


# Not with a Ray instance the trainer starts itself: its GCS and raylet are in the trainer's process
# group too, and Ray's daemons handle SIGTERM by shutting down (in CI the run then lost its GCS).
# With --ray-address the actors and daemons live outside the group. See the README's Reliability.
@pytest.mark.parametrize(("sent_to", "backend"), [("trainer", "local"), ("group", "local")])
def test_sigterm_mid_update_abandons_it_and_the_resume_stays_exact(cli, tmp_path: Path, sent_to: str, backend: str) -> None:
    """SIGTERM to the trainer alone mid-update, or to its whole process group mid-rollout (workers
    and forkserver too, item 8): either way update 3 is abandoned, no worker dies or is replaced,
    and the resume is exact."""
    if backend == "ray":
        pytest.importorskip("ray", reason='Ray is not installed (pip install -e ".[ray]")')
    args = ["--updates", "4", *TINY, "--checkpoint-every", "1", "--seed", "7", "--backend", backend]
    # The uninterrupted reference is the same run for every way of sending the signal: made once a
    # session and copied here (conftest.run_once).
    reference_dir = Path(run_once(cli, tmp_path / "straight", *args)["run_dir"])
    # The last three checkpoints are kept, newest first, and nothing else is left in the folder.
    kept = checkpoint_paths(reference_dir)
    assert sorted(p.name for p in kept[0].parent.iterdir()) == sorted(p.name for p in kept)
    assert [load_checkpoint(p)["update"] for p in kept] == [4, 3, 2]

    split = subprocess.run([sys.executable, "-c", STOP_MID_UPDATE, *args, "--data-dir", str(tmp_path / "split")],
                           cwd=REPO, env=dict(cli.env(), SIGTERM_TO=sent_to), capture_output=True, text=True,
                           timeout=300, start_new_session=True)  # its own group: the signal spares pytest
    assert split.returncode == 128 + signal.SIGTERM, split.stderr[-3000:]
    interrupted = summary_of(split.stdout)
    assert interrupted["worker_restarts"] == 0 and "replaced" not in split.stderr, split.stderr[-3000:]
    # Update 3 was abandoned between minibatches: the run is exactly as after update 2.
    assert interrupted["status"] == "interrupted" and interrupted["updates"] == 2
    assert interrupted["env_steps"] == 2 * PER_UPDATE
    checkpoint = load_checkpoint(Path(interrupted["checkpoint"]))
    at_two = load_checkpoint(kept[2])
    assert checkpoint["update"] == 2 and checkpoint["env_steps"] == 2 * PER_UPDATE and checkpoint["games"] == at_two["games"]
    for name, tensor in at_two["model"].items():
        assert torch.equal(tensor, checkpoint["model"][name]), name
    games_csv = (Path(interrupted["run_dir"]) / "games.csv").read_text().splitlines()
    assert len(games_csv) == 1 + interrupted["games"]  # no row from the abandoned rollout
    assert cli.leftovers() == []

    resumed = cli.run("experiments.breakout", "--resume", interrupted["run_uuid"], "--data-dir", str(tmp_path / "split"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    final, reference = load_checkpoint(Path(summary_of(resumed.stdout)["checkpoint"])), load_checkpoint(kept[0])
    assert final["update"] == 4 and final["games"] == reference["games"] and final["scores"] == reference["scores"]
    for name, tensor in reference["model"].items():
        assert torch.equal(tensor, final["model"][name]), name
    assert cli.leftovers() == []


def _first_leg(cli, tmp_path: Path, *extra: str) -> dict:
    """A TINY run stopped after 1 of 3 updates (a run option: the resume goes on to 3); made once a
    session and copied here (conftest.run_once)."""
    return run_once(cli, tmp_path, "--updates", "3", *TINY, "--stop-after-env-steps", str(PER_UPDATE), *extra)


@pytest.fixture(scope="module")
def crafted_resumes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two resumes, each of its own copy of one first leg (_first_leg) whose checkpoint holds three
    things a resume must not take as they are: a poisoned live value, the dashboard the run was sent
    to before (a local server that records what reaches it, up while both resume), and the actions'
    sampling state of a CUDA generator. A resume is a whole run's start, so the three tests below
    share these two, each checking its own part: the three are independent (each is refused or
    replaced on its own line, and the run goes on from its checkpoint either way)."""
    cli, root = Cli(), tmp_path_factory.mktemp("crafted")
    summary = _first_leg(cli, root / "a")
    path = Path(summary["checkpoint"])
    state = load_checkpoint(path)
    sampled_on = (state["sample_generator_device"], state["sample_generator"].numel())
    with recording_server() as (url, seen):
        state["live_values"]["learning_rate"] = -0.01  # what the unchecked trainer saved
        state["config"]["dashboard"] = url  # the run was sent to this dashboard before
        state["sample_generator"] = torch.tensor(H200_SAMPLING_STATE, dtype=torch.uint8)
        state["sample_generator_device"] = "cuda"
        save_checkpoint(path, state)
        shutil.copytree(root / "a", root / "b")
        resumes = [cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--stop-after-env-steps", "none",
                           "--data-dir", str(root / copy)) for copy in ("a", "b")]
        # labml flushes to its dashboard before the process exits: had it sent, it would be here.
        sent = list(seen)
    for resumed in resumes:
        assert resumed.returncode == 0, resumed.stderr[-2000:]
    finals = [load_checkpoint(Path(summary_of(resumed.stdout)["checkpoint"])) for resumed in resumes]
    return {"sampled_on": sampled_on, "url": url, "resumes": resumes, "finals": finals, "sent": sent,
            "leftovers": cli.leftovers()}


@pytest.mark.slow
def test_a_poisoned_live_value_in_the_checkpoint_does_not_poison_the_resume(crafted_resumes: dict) -> None:
    for resumed, final in zip(crafted_resumes["resumes"], crafted_resumes["finals"], strict=True):
        assert "ignoring the checkpoint's live value learning_rate = -0.01: expected a value in [0, 0.01]" in resumed.stderr
        assert final["update"] == 3 and final["live_values"]["learning_rate"] == 2.5e-4
    assert crafted_resumes["leftovers"] == []


def _two_checkpointed_updates(cli, tmp_path: Path) -> dict:
    """A TINY run stopped after 2 of 3 updates, checkpointed after each (checkpoint.pt and
    checkpoint.1.pt); made once a session and copied here (conftest.run_once, which keeps file modes)."""
    return run_once(cli, tmp_path, "--updates", "3", *TINY, "--checkpoint-every", "1",
                    "--stop-after-env-steps", str(2 * PER_UPDATE))


def test_a_truncated_newest_checkpoint_falls_back_to_the_one_before(cli, tmp_path: Path) -> None:
    summary = _two_checkpointed_updates(cli, tmp_path)
    assert summary["updates"] == 2
    newest = Path(summary["checkpoint"])
    newest.write_bytes(newest.read_bytes()[:1000])  # a bad state in the newest file
    resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--stop-after-env-steps", "none",
                      "--data-dir", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"warning: checkpoint {newest} is corrupt or truncated" in resumed.stderr
    assert "resuming from the one before it, checkpoint.1.pt (update 1)" in resumed.stderr
    final = summary_of(resumed.stdout)
    assert final["updates"] == 3 and final["env_steps"] == 3 * PER_UPDATE
    assert cli.leftovers() == []


def test_a_sigterm_after_the_stderr_reader_died_still_checkpoints(cli, tmp_path: Path) -> None:
    """A sweep or curves driver reads its trials' stderr; killed, it leaves them a broken pipe.
    The SIGTERM that follows (to the group) used to die in its own message (BrokenPipeError,
    status "crashed", error none, no final checkpoint): now the message is dropped and the run
    stops as any interrupted run does."""
    process = cli.start_held(tmp_path / "held", "--updates", "6", *TINY, "--checkpoint-every", "0", "--data-dir", str(tmp_path))
    process.stderr.close()  # the only reader: the run's next write to stderr gets EPIPE
    process.send_signal(signal.SIGTERM)
    stdout = process.stdout.read()
    assert process.wait(timeout=600) == 128 + signal.SIGTERM
    summary = summary_of(stdout)
    assert summary["status"] == "interrupted" and summary["error"] is None and summary["updates"] == 1
    assert load_checkpoint(Path(summary["checkpoint"]))["update"] == 1  # written at the stop: checkpoint_every is 0
    assert cli.leftovers() == []


# ---- item 6: a checkpoint is data, never code ------------------------------------------------------

class RunsCode:
    """Unpickling this calls os.system: what a crafted checkpoint on a shared data dir would do."""

    def __init__(self, proof: Path) -> None:
        self.proof = proof

    def __reduce__(self):
        return os.system, (f"touch {self.proof}",)


def crafted_checkpoints(proof: Path, real: dict) -> dict[str, bytes]:
    """A real checkpoint's content with code hidden in it, as torch.save and as plain pickle write it."""
    import io
    import pickle
    state = dict(real, model={**real["model"], "trunk.0.weight": RunsCode(proof)})
    as_torch = io.BytesIO()
    torch.save(state, as_torch)
    return {"torch.save": as_torch.getvalue(), "pickle": pickle.dumps(state)}


def test_a_crafted_checkpoint_is_refused_without_running_anything(cli, tmp_path: Path) -> None:
    summary = _first_leg(cli, tmp_path)
    run_dir, proof = Path(summary["run_dir"]), tmp_path / "code-ran"
    real = load_checkpoint(Path(summary["checkpoint"]))
    # The real checkpoint holds only tensors and plain values: emulator states are bytes.
    assert isinstance(real["env_states"][0]["ale"], bytes) and isinstance(real["env_states"][0]["observation"], bytes)
    for kind, data in crafted_checkpoints(proof, real).items():
        for path in checkpoint_paths(run_dir):  # every kept one: no fallback to a good one
            path.write_bytes(data)
        resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--data-dir", str(tmp_path))
        evaluated = cli.run("experiments.evaluate", "--checkpoint", str(checkpoint_paths(run_dir)[0]), "--games", "1")
        for result in (resumed, evaluated):
            assert result.returncode == 2, (kind, result.stderr[-2000:])
            lines = result.stderr.strip().splitlines()
            assert "is not a checkpoint of this project" in lines[-1] and "nothing in it was run" in lines[-1], (kind, lines)
            assert "Traceback" not in result.stderr
        assert not proof.exists(), kind
    assert cli.leftovers() == []


@pytest.mark.parametrize(("record", "bad_row", "why"), [
    ("games.csv", "1,2,three,4,0", "not a row of env_step,update,score,length,truncated (its score is not a number)"),
    ("updates.csv", "2,64" + ",x" * 20, "not a row of numbers (its learning_rate is not a number)"),
])
def test_a_resume_refuses_a_run_whose_records_cannot_be_read_before_anything_starts(
        cli, tmp_path: Path, record: str, bad_row: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-edited or truncated games.csv / updates.csv used to end the resume in a traceback
    after the game workers had started; now it is one line and nothing in the run folder changes.
    games.csv is refused by the real command, updates.csv by its main() in this process (the refusal
    is made before anything starts, so it needs no Python of its own)."""
    summary = _first_leg(cli, tmp_path)
    run_dir = Path(summary["run_dir"])
    path = run_dir / record
    rows = path.read_text().splitlines()
    path.write_text("\n".join([*rows, bad_row]) + "\n")
    refused = (_refused_resume(cli, tmp_path, summary) if record == "games.csv"
               else _refused_resume_in_process(capsys, tmp_path, summary))
    assert refused == [
        f"error: --resume {summary['run_uuid']}: expected a run whose records can be read "
        f"({path}:{len(rows) + 1}: {why})"]


def _refused_resume(cli, tmp_path: Path, summary: dict) -> list[str]:
    """The stderr lines of a `--resume` of the run that must be refused: exit 2, no byte of its
    folder changed, no process left."""
    run_dir = Path(summary["run_dir"])

    def files() -> dict[Path, bytes]:
        return {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    before = files()
    resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--data-dir", str(tmp_path))
    assert resumed.returncode == 2, resumed.stderr[-2000:]
    assert files() == before
    assert cli.leftovers() == []
    return resumed.stderr.strip().splitlines()


GAMES_LEG = ["--updates", "6", "--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "128",
             "--minibatches", "2", "--epochs", "1", "--stop-after-env-steps", str(3 * 256)]


def _leg_with_games(cli, tmp_path: Path) -> dict:
    """3 of 6 updates of 256 agent steps, long enough for games to end before the checkpoint; made
    once a session and copied here (conftest.run_once)."""
    summary = run_once(cli, tmp_path, *GAMES_LEG)
    assert summary["updates"] == 3 and summary["games"] >= 1  # the premise of the tests below
    return summary


def test_a_resume_drops_a_last_line_cut_short_after_the_checkpoint(cli, tmp_path: Path) -> None:
    """A machine that loses power (or a disk that fills) in the middle of an append leaves a last
    line without its line end. Past the checkpoint it is work the resume does again, so the resume
    drops it and says so, where it used to refuse the run ('expected a run whose records can be read')."""
    summary = _leg_with_games(cli, tmp_path)
    run_dir = Path(summary["run_dir"])
    games_before = (run_dir / "games.csv").read_text()
    updates_before = (run_dir / "updates.csv").read_text()
    cut = {"games.csv": "1001,4,1", "updates.csv": "4,1024,0.000125,0.0"}  # rows of update 4, cut mid-cell
    for name, text in cut.items():
        with (run_dir / name).open("a", newline="") as f:
            f.write(text)
    resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--stop-after-env-steps", "none",
                      "--data-dir", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for name, before in (("games.csv", games_before), ("updates.csv", updates_before)):
        line = before.count("\n") + 1
        assert (f"note: {run_dir / name}:{line} was cut short in the middle of an append when the run ended; "
                "it comes after the checkpoint, and the resume drops it") in resumed.stderr.splitlines()
        after = (run_dir / name).read_text()
        assert after.startswith(before) and cut[name] not in after.splitlines() and after.endswith("\n")
    games = read_games(run_dir / "games.csv")
    assert len(games) == summary_of(resumed.stdout)["games"] and [g.update for g in games] == sorted(g.update for g in games)
    assert [row["update"] for row in read_updates(run_dir / "updates.csv")] == [1, 2, 3, 4, 5, 6]
    assert cli.leftovers() == []


@pytest.mark.parametrize("record", ["games.csv", "updates.csv"])
def test_a_resume_refuses_a_line_cut_short_before_the_checkpoint(cli, tmp_path: Path, record: str) -> None:
    """A last line cut short that the checkpoint still counts (its whole rows stop short of the
    checkpoint's games or update): dropping it would leave a gap, so the resume refuses in one line
    and changes nothing."""
    summary = _leg_with_games(cli, tmp_path)
    run_dir = Path(summary["run_dir"])
    path = run_dir / record
    text = path.read_text()
    path.write_text(text[:-2])  # the last row loses its last two characters, its line end among them
    lines = text.count("\n")  # the cut row is the file's last line
    whole = lines - 2  # rows before it (less the header)
    what = f"the {summary['games']} games its checkpoint counts" if record == "games.csv" else "update 3, its checkpoint's"
    assert _refused_resume(cli, tmp_path, summary) == [
        f"error: --resume {summary['run_uuid']}: expected a run whose records reach its checkpoint ({path}:{lines} was "
        f"cut short in the middle of an append, and the {whole} whole rows before it do not reach {what})"]


# ---- --device may change on a resume: a checkpoint moves between a CPU and a GPU --------------------

# The action-sampling state the H200's 10M-step run saved at update 2,265 (docs/results.md): CUDA's
# Philox generator, a seed (1454127163) and an offset (2,319,360), 8 little-endian bytes each.
H200_SAMPLING_STATE = [59, 56, 172, 86, 0, 0, 0, 0, 0, 100, 35, 0, 0, 0, 0, 0]


@pytest.mark.slow
def test_a_checkpoint_sampled_on_cuda_resumes_on_the_cpu_the_same_way_twice(crafted_resumes: dict) -> None:
    """The bug: a CUDA generator's 16 bytes were set into the CPU's generator, and the resume died in
    a traceback after its workers had started. Now it goes on from a new stream that the run's seed
    and the update decide: two resumes of one checkpoint make one run."""
    assert crafted_resumes["sampled_on"] == ("cpu", 5056)  # what the run saved, before it was replaced
    for resumed, final in zip(crafted_resumes["resumes"], crafted_resumes["finals"], strict=True):
        assert ("the checkpoint's actions were sampled on cuda; this resume samples them on cpu from a new random "
                "stream (seeded by the run's seed and update 1): the run goes on, but not bit for bit as it would "
                "on cuda") in resumed.stderr.splitlines()
        assert final["update"] == 3 and final["sample_generator_device"] == "cpu"
    finals = crafted_resumes["finals"]
    assert torch.equal(finals[0]["sample_generator"], finals[1]["sample_generator"])
    assert all(torch.equal(finals[0]["model"][k], finals[1]["model"][k]) for k in finals[0]["model"])
    assert crafted_resumes["leftovers"] == []


@pytest.mark.parametrize("recorded", [True, False], ids=["device recorded", "older checkpoint, told by size"])
def test_a_resume_on_another_device_seeds_sampling_from_the_run_seed_and_update(trainer: Trainer, recorded: bool) -> None:
    from ppo.seeding import resumed_sampling_seed
    state = trainer.state_dict({}).stored()
    state["update"] = 2265
    state["sample_generator"] = torch.tensor(H200_SAMPLING_STATE, dtype=torch.uint8)
    if recorded:
        state["sample_generator_device"] = "cuda"
    else:
        del state["sample_generator_device"]  # checkpoints before 2026-11-26 did not record it
    events: list[str] = []
    trainer.on_event = events.append
    trainer.load_state_dict(Checkpoint.from_stored(state))
    expected = torch.Generator().manual_seed(resumed_sampling_seed(trainer.torch_seed, 2265))
    assert torch.equal(trainer.sample_generator.get_state(), expected.get_state())
    assert len(events) == 1 and "update 2,265" in events[0]
    # On the device kind it was saved on, the state is restored as it was: the resume is exact.
    same = trainer.state_dict({})
    trainer.sample_generator.manual_seed(1)
    trainer.load_state_dict(same)
    assert torch.equal(trainer.sample_generator.get_state(), same.sample_generator) and len(events) == 1


KINDS = "the 5,056 bytes of a CPU generator's state or the 16 bytes of a CUDA generator's state (uint8)"


BAD_RANDOM_STATES = [  # (field, value, the one line that refuses it)
    ("sample_generator", torch.zeros(7, dtype=torch.uint8),
     f"the checkpoint's sample_generator is a torch.uint8 tensor of shape (7,); expected {KINDS}"),
    ("sample_generator", "seed 1", f"the checkpoint's sample_generator is str 'seed 1'; expected {KINDS}"),
    ("sample_generator_device", "cuda",
     "the checkpoint's sample_generator_device is 'cuda' but its sample_generator holds 5,056 bytes; "
     f"expected {KINDS.removesuffix(' (uint8)')}"),
    ("shuffle_rng", {"bit_generator": "MT19937", "state": {}},
     "the checkpoint's shuffle_rng is not the state of numpy's PCG64 generator (ValueError: state must be for a PCG64 RNG)"),
    ("shuffle_rng", [1, 2], "the checkpoint's shuffle_rng is not the state of numpy's PCG64 generator (TypeError: a list, not a dict)"),
]


def _refused_resume_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path, summary: dict) -> list[str]:
    """_refused_resume with the same `--resume` given to the command's main() in this process: a
    refusal made before anything starts needs no Python of its own to prove it (`refused_in_process`,
    and no byte of the run folder changed)."""
    run_dir = Path(summary["run_dir"])

    def files() -> dict[Path, bytes]:
        return {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    before = files()
    line = refused_in_process(capsys, ["--resume", summary["run_uuid"], "--data-dir", str(tmp_path)])
    assert files() == before
    return [line]


def test_a_checkpoint_whose_random_states_cannot_be_restored_is_refused_before_anything_starts(
        cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Restoring them is the resume's first step after the workers start: a state that cannot be
    restored used to end it there in a traceback. Each bad state is written into every kept checkpoint;
    the first is refused by the real command, the others by its main() in this process."""
    summary = _first_leg(cli, tmp_path)
    paths = [p for p in checkpoint_paths(Path(summary["run_dir"])) if p.exists()]
    good = {path: path.read_bytes() for path in paths}
    for index, (field, value, why) in enumerate(BAD_RANDOM_STATES):
        for path in paths:
            save_checkpoint(path, {**load_checkpoint(path), field: value})
        refused = (_refused_resume(cli, tmp_path, summary) if index == 0
                   else _refused_resume_in_process(capsys, tmp_path, summary))
        assert refused == [f"error: {why}"], field
        for path, data in good.items():
            path.write_bytes(data)


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

    result = subprocess.run([sys.executable, "-m", "experiments.breakout", "--updates", "1", *TINY,
                             "--data-dir", str(tmp_path / "runs")], cwd=project, env=cli.env(),
                            capture_output=True, text=True, timeout=300)
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


def _refused_before_anything_started(cli, result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().startswith(expected) and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""
    assert cli.leftovers() == []  # no worker was ever started


@pytest.mark.parametrize("device", ["cuda", f"cuda:{torch.cuda.device_count()}"])
def test_a_device_this_machine_lacks_is_one_line_before_anything_starts(cli, tmp_path: Path, device: str) -> None:
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA; cuda:N past the last device is tested instead")
    result = cli.run("experiments.breakout", "--device", device, "--updates", "1", *TINY, "--data-dir", str(tmp_path))
    _refused_before_anything_started(cli, result, f"error: --device {device}: expected ")
    assert list(tmp_path.iterdir()) == []


def test_a_relaunch_the_game_cannot_press_is_one_line_before_anything_starts(cli, tmp_path: Path) -> None:
    # Atlantis has FIRE but no RIGHT: without this check every worker would raise at start.
    result = cli.run("experiments.breakout", "--game", "atlantis", "--relaunch", "noop-fire-right", "--updates", "1", *TINY,
                     "--data-dir", str(tmp_path))
    _refused_before_anything_started(cli, result, "error: --relaunch noop-fire-right: expected fire: Atlantis has no RIGHT action "
                                                  "(NOOP, FIRE, RIGHTFIRE, LEFTFIRE)")
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_data_dir_is_one_line_before_anything_starts(cli, tmp_path: Path) -> None:
    with read_only_folder(tmp_path / "ro") as folder:
        result = cli.run("experiments.breakout", "--updates", "1", *TINY, "--data-dir", str(folder / "runs"))
        _refused_before_anything_started(cli, result, f"error: --data-dir {folder / 'runs'}: expected a folder this user can write to")


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "..", "a/b", ".hidden", ""])
def test_a_name_cannot_put_the_run_outside_the_data_dir(cli, tmp_path: Path, name: str, capsys) -> None:
    data_dir = tmp_path / "a" / "b" / "runs"
    args = ["--name", name, "--updates", "1", *TINY, "--data-dir", str(data_dir)]
    if name == "../../x":  # one through the real command line: its exit status, output and no process left
        result = cli.run("experiments.breakout", *args)
        _refused_before_anything_started(cli, result, "error: --name ")
        stderr = result.stderr
    else:  # the option's own check, made before anything starts: the others in-process, as the same main()
        stderr = refused_in_process(capsys, args)
        assert stderr.startswith("error: --name "), stderr
    assert "expected a folder name" in stderr
    assert list(tmp_path.rglob("*")) == []


# ---- item 10: which dashboard a resume sends to, and file modes ----------------------------------

@contextlib.contextmanager
def recording_server() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that answers every request `{}` and records its path."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.path)
            body = b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_resume_without_dashboard_sends_to_none(crafted_resumes: dict) -> None:
    url = crafted_resumes["url"]
    assert crafted_resumes["sent"] == []
    for resumed, final in zip(crafted_resumes["resumes"], crafted_resumes["finals"], strict=True):
        assert f"note: this run was sent to the dashboard {url} before; add --dashboard URL" in resumed.stderr
        assert final["config"]["dashboard"] is None
    assert crafted_resumes["leftovers"] == []


def test_every_file_of_a_run_has_the_same_umask_mode(cli, tmp_path: Path) -> None:
    # The modes the run wrote: run_once's copy keeps each file's mode, and rewrites summary.json and
    # configs.yaml in place (their mode unchanged).
    run_dir = Path(_two_checkpointed_updates(cli, tmp_path)["run_dir"])
    modes = {str(p.relative_to(run_dir)): oct(stat.S_IMODE(p.stat().st_mode)) for p in run_dir.rglob("*") if p.is_file()}
    assert {"summary.json", "games.csv", "run.yaml", "checkpoints/checkpoint.pt", "checkpoints/checkpoint.1.pt"} <= set(modes)
    assert set(modes.values()) == {oct(file_mode())}, json.dumps(modes, indent=1)


# ---- issue 39 item 10: a resume that would stop before where it is ---------------------------------

def test_a_resume_told_to_stop_before_its_own_steps_is_refused(cli, tmp_path: Path) -> None:
    """It used to print "resumed at update 1 of 1" and mark the run completed."""
    summary = _first_leg(cli, tmp_path)  # 1 update of 32 agent steps, stopped there by --stop-after-env-steps 32
    resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--stop-after-env-steps", "16",
                      "--data-dir", str(tmp_path))
    _refused_before_anything_started(cli, resumed, f"error: --stop-after-env-steps 16: expected at least the run's own "
                                                   f"{PER_UPDATE} agent steps (update 1 of 3), or none, to resume it")
    assert json.loads((Path(summary["run_dir"]) / "summary.json").read_text()) == summary


# ---- issue 39 item 11: a signal during start-up ------------------------------------------------------

def _processes_of_group(pgid: int) -> list[str]:
    """The live processes (zombies are dead, waiting to be reaped) of process group `pgid`, as their command lines."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else []
            if fields and int(fields[2]) == pgid and fields[0] != "Z":
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_a_sigterm_during_start_up_is_one_message_and_leaves_nothing(cli, tmp_path: Path) -> None:
    """16 workers on this machine take seconds to start. TERM to the whole group once the run has
    printed its first line (labml set up, the workers starting) used to end in exit 143 with 32
    BrokenPipeError tracebacks and no word of what was kept."""
    process = subprocess.Popen([sys.executable, "-m", "experiments.breakout", "--n-workers", "16", "--updates", "2",
                                "--worker-steps", "16", "--minibatches", "2", "--epochs", "1", "--data-dir", str(tmp_path)],
                               cwd=REPO, env=cli.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    first = process.stderr.readline()  # the event: the run has its uuid and is starting its workers
    assert first.startswith("breakout run "), first
    os.killpg(process.pid, signal.SIGTERM)
    stdout, rest = process.communicate(timeout=600)
    stderr = first + rest
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr[-3000:]
    assert cli.leftovers() == []
    # A worker still exiting shows for a moment with an empty command line: wait for the group to empty.
    deadline = time.monotonic() + 60
    while (alive := _processes_of_group(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive == []
    if stdout.strip():  # the TERM came after the first update began: an interrupted run, checkpointed
        summary = summary_of(stdout)
        assert summary["status"] == "interrupted" and load_checkpoint(Path(summary["checkpoint"]))["update"] == summary["updates"]
    else:  # before it: nothing written, and it says so once
        assert [line for line in stderr.splitlines() if line.startswith("stopped by")] == [
            "stopped by SIGTERM before the first update: nothing was kept (no run folder was made)"]
        assert list(tmp_path.rglob("*")) == []
