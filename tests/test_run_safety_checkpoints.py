"""A checkpoint is data to check, never code to run nor values to trust: crafted pickles, truncated
files, random states that cannot be restored, and a resume of one holding a poisoned live value,
a dashboard nobody asked for and a CUDA generator's sampling state."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from experiments.evaluate import main as evaluate_main
from experiments.run.folders import RunFolder
from ppo.checkpoint import load_checkpoint, save_checkpoint
from tests.conftest import Cli, refused_in_process
from tests.run_safety_support import (
    H200_SAMPLING_STATE,
    PER_UPDATE,
    first_leg,
    refused_resume,
    refused_resume_in_process,
    two_checkpointed_updates,
)
from tests.test_experiment import summary_of


@pytest.fixture(scope="module")
def crafted_resumes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two resumes, each of its own copy of one first leg (_first_leg) whose checkpoint holds three
    things a resume must not take as they are: a poisoned live value, the dashboard the run was sent
    to before (a local server that records what reaches it, up while both resume), and the actions'
    sampling state of a CUDA generator. A resume is a whole run's start, so the three tests below
    share these two, each checking its own part: the three are independent (each is refused or
    replaced on its own line, and the run goes on from its checkpoint either way)."""
    cli, root = Cli(), tmp_path_factory.mktemp("crafted")
    summary = first_leg(cli, root / "a")
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


@pytest.mark.slow
def test_a_resume_without_dashboard_sends_to_none(crafted_resumes: dict) -> None:
    url = crafted_resumes["url"]
    assert crafted_resumes["sent"] == []
    for resumed, final in zip(crafted_resumes["resumes"], crafted_resumes["finals"], strict=True):
        assert f"note: this run was sent to the dashboard {url} before; add --dashboard URL" in resumed.stderr
        assert final["config"]["dashboard"] is None
    assert crafted_resumes["leftovers"] == []


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


# ---- which dashboard a resume sends to -----------------------------------------------------------

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


def test_a_truncated_newest_checkpoint_falls_back_to_the_one_before(cli, tmp_path: Path) -> None:
    summary = two_checkpointed_updates(cli, tmp_path)
    assert summary["updates"] == 2
    newest = Path(summary["checkpoint"])
    newest.write_bytes(newest.read_bytes()[:1000])  # a bad state in the newest file
    resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--stop-after-env-steps", "none",
                      "--data-dir", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (f"warning: {newest}: expected a checkpoint written by python -m experiments.breakout (checkpoint {newest} is "
            "corrupt or truncated") in resumed.stderr  # the line that would refuse it, were it the only one
    assert "resuming from the one before it, checkpoint.1.pt (update 1)" in resumed.stderr
    final = summary_of(resumed.stdout)
    assert final["updates"] == 3 and final["env_steps"] == 3 * PER_UPDATE
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


def test_a_crafted_checkpoint_is_refused_without_running_anything(cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The torch.save kind is given to the real commands; the pickle kind to their main() in this
    process, where code run by the loader would touch the proof file all the same."""
    summary = first_leg(cli, tmp_path)
    run_dir, proof = Path(summary["run_dir"]), tmp_path / "code-ran"
    real = load_checkpoint(Path(summary["checkpoint"]))
    # The real checkpoint holds only tensors and plain values: emulator states are bytes.
    assert isinstance(real["env_states"][0]["ale"], bytes) and isinstance(real["env_states"][0]["observation"], bytes)
    for kind, data in crafted_checkpoints(proof, real).items():
        for path in RunFolder.at(run_dir).checkpoints:  # every kept one: no fallback to a good one
            path.write_bytes(data)
        resume = ["--resume", summary["run_uuid"], "--data-dir", str(tmp_path)]
        evaluate = ["--checkpoint", str(RunFolder.at(run_dir).checkpoints[0]), "--games", "1"]
        if kind == "torch.save":
            refusals = []
            for result in (cli.run("experiments.breakout", *resume), cli.run("experiments.evaluate", *evaluate)):
                assert result.returncode == 2 and "Traceback" not in result.stderr, (kind, result.stderr[-2000:])
                refusals.append(result.stderr.strip().splitlines()[-1])
        else:
            refusals = [refused_in_process(capsys, resume), refused_in_process(capsys, evaluate, evaluate_main)]
        for line in refusals:
            assert "is not a checkpoint of this project" in line and "nothing in it was run" in line, (kind, line)
        assert not proof.exists(), kind
    assert cli.leftovers() == []


def test_a_checkpoints_counts_are_read_without_torch_and_nothing_in_it_is_run(cli, tmp_path: Path) -> None:
    """ppo/checkpoint_counts.py, the early answer of a resume's stop (experiments/run/plan.py): the
    update, agent steps and config a checkpoint holds, read from its pickle with every class it names
    made inert, so code hidden in a crafted one runs nothing here either; what is not a checkpoint
    of torch's archive, or holds no counts, is no answer."""
    import pickle

    from ppo.checkpoint_counts import Counts, read_counts

    summary = first_leg(cli, tmp_path)
    path, proof = Path(summary["checkpoint"]), tmp_path / "code-ran"
    real = load_checkpoint(path)

    def counts() -> Counts | None:
        with path.open("rb") as file:
            return read_counts(file)
    assert counts() == Counts(1, PER_UPDATE, real["config"])
    crafted = crafted_checkpoints(proof, real)
    path.write_bytes(crafted["torch.save"])
    assert counts() == Counts(1, PER_UPDATE, real["config"]) and not proof.exists()
    save_checkpoint(path, {**real, "env_steps": "32"})
    assert counts() is None
    for data in (crafted["pickle"], pickle.dumps(real), crafted["torch.save"][:-200], b"", b"PK" * 100):
        path.write_bytes(data)
        assert counts() is None
    assert not proof.exists()


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


def test_a_checkpoint_whose_random_states_cannot_be_restored_is_refused_before_anything_starts(
        cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Restoring them is the resume's first step after the workers start: a state that cannot be
    restored used to end it there in a traceback. Each bad state is written into every kept checkpoint;
    the first is refused by the real command, the others by its main() in this process."""
    summary = first_leg(cli, tmp_path)
    paths = [p for p in RunFolder.at(Path(summary["run_dir"])).checkpoints if p.exists()]
    good = {path: path.read_bytes() for path in paths}
    for index, (field, value, why) in enumerate(BAD_RANDOM_STATES):
        for path in paths:
            save_checkpoint(path, {**load_checkpoint(path), field: value})
        refused = (refused_resume(cli, tmp_path, summary) if index == 0
                   else refused_resume_in_process(capsys, tmp_path, summary))
        assert refused == [f"error: {paths[0]}: expected a checkpoint written by python -m experiments.breakout ({why})"], field
        for path, data in good.items():
            path.write_bytes(data)
