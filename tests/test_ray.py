"""The Ray backend beyond the pool contract (tests/test_pool.py runs that over Ray too): the same
rollouts as the local backend, Ray's own errors, cluster addresses, the CLI, sweeps' Ray.

One `ray.init(num_cpus=2)` is shared by the module's in-process tests (Ray takes seconds to
start); the command-line tests start their own private instance and must leave nothing behind.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from configs.ppo import PPOConfig
from experiments.breakout import main
from game.atari import GameSpec
from game.vector import PipePool, game_specs, make_pool
from game.vector.protocol import WorkerDied, WorkerError, WorkerTimeout
from ppo.seeding import derive_seeds
from ppo.trainer import Trainer
from ray_setup.installed import ray_installed
from ray_setup.joining import tighten_token_file
from tests import forked_run
from tests.conftest import REPO, ROLLOUT_FIELDS, refused_in_process, train_from_seed
from tests.process_table import is_alive
from tests.ray_checks import attack, check_private, check_refused, snapshot
from tests.test_experiment import summary_of

pytestmark = pytest.mark.ray
requires_ray = pytest.mark.skipif(not ray_installed(), reason='Ray is not installed (pip install -e ".[ray]")')

def wait_dead(pids: list[int], timeout_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if is_alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def ray_pool(specs: list[GameSpec], envs_per_worker: int = 1, timeout_s: float = 60.0):
    from game.vector.ray_actors import RayPool

    # Half a CPU each: the replacement of a killed actor must fit next to the survivors on 2 CPUs.
    return RayPool(specs, envs_per_worker, timeout_s, cpus_per_worker=0.5)


def first_rollout(pool_factory, overlap: bool) -> dict[str, np.ndarray]:
    config = PPOConfig(n_workers=2, envs_per_worker=2, worker_steps=32, seed=3, overlap_sampling=overlap)
    return train_from_seed(config, pool_factory)[0]


@requires_ray
@pytest.mark.parametrize("overlap", [False, True])
def test_same_seed_same_first_rollout_as_the_local_backend(ray_instance, overlap: bool) -> None:
    local = first_rollout(PipePool, overlap)
    remote = first_rollout(ray_pool, overlap)
    for name in ROLLOUT_FIELDS:
        np.testing.assert_array_equal(local[name], remote[name], err_msg=name)
    assert remote["observations"].dtype == np.uint8 and remote["observations"].any()


@requires_ray
def test_full_game_scores_and_life_loss_terminals_match_the_local_pool(ray_instance) -> None:
    # Until a game that scored is over (lives lost, games ended, rewards that are not all zero
    # behind it): both pools report the same events on the way.
    specs = [GameSpec(seed=7 + i, noop_max=0) for i in range(2)]
    actions = np.random.default_rng(0).integers(4, size=(700, 2))
    with PipePool(specs) as local, ray_pool(specs) as remote:
        episodes: list[list] = [[], []]
        terminals = 0
        for a in actions:
            lb, rb = local.step(a), remote.step(a)
            np.testing.assert_array_equal(local.observations, remote.observations)
            np.testing.assert_array_equal(lb.rewards, rb.rewards)
            np.testing.assert_array_equal(lb.terminals, rb.terminals)
            terminals += int(rb.terminals.sum())
            episodes[0] += lb.episodes
            episodes[1] += rb.episodes
            if any(episode.score > 0 for _, episode in rb.episodes):
                break
        else:
            pytest.fail(f"no game with a score ended within {len(actions)} steps: {episodes[1]}")
        assert episodes[0] == episodes[1] and len(episodes[1]) >= 1  # whole games, all 5 lives
        assert terminals > len(episodes[1])  # lost lives are terminals too, not only game overs


@requires_ray
def test_actors_never_import_torch_and_report_where_they_run(ray_instance) -> None:
    """The pool contract's torch test (tests/test_pool.py) over Ray, and where each actor runs."""
    with ray_pool([GameSpec(seed=1), GameSpec(seed=2)]) as pool:
        info = pool.worker_info()
        assert [i["torch_imported"] for i in info] == [False, False]
        assert len({i["actor_id"] for i in info}) == 2 and all(i["pid"] != os.getpid() for i in info)


@requires_ray
def test_exception_in_an_actor_names_worker_and_actor_with_traceback(ray_instance) -> None:
    """The pool contract's exception test (tests/test_pool.py) over Ray, and the actor named."""
    with ray_pool([GameSpec(seed=i) for i in range(4)], envs_per_worker=2) as pool:
        pids = pool.worker_pids()
        actor_id = pool.worker_info()[1]["actor_id"]
        with pytest.raises(WorkerError) as error:
            pool.step(np.array([0, 0, 0, 9]))  # no action 9: IndexError inside actor 1
        message = str(error.value)
        assert error.value.worker == 1 and message.startswith("worker 1 raised IndexError")
        assert "--- traceback in worker 1 ---" in message and 'game/atari.py", line' in message
        assert f"Ray actor {actor_id}" in message and "\x1b[" not in message
        pool.step(np.zeros(4, np.int64))  # every actor still serves
    assert wait_dead(pids) == []


@requires_ray
def test_killed_actor_is_replaced_by_the_trainer_and_counted(ray_instance) -> None:
    config = PPOConfig(n_workers=2, worker_steps=16, minibatches=2, epochs=1)
    seeds = derive_seeds(config.seed, config.n_envs)
    with ray_pool(game_specs(config, seeds.env_seeds)) as pool:
        pool.reset()
        events: list[str] = []
        trainer = Trainer(config, pool, seeds, torch.device("cpu"), on_event=events.append)
        trainer.iteration()
        victim = pool.worker_pids()[1]
        os.kill(victim, signal.SIGKILL)
        metrics = trainer.iteration()
        assert trainer.worker_restarts == 1 and metrics["worker_restarts"] == 1
        assert pool.worker_pids()[1] != victim and pool.specs[1].seed == seeds.env_seeds[1] + 1_000_003
        assert trainer.env_steps == 2 * config.batch_size  # the broken rollout was redone whole
        assert events and events[0].startswith("worker 1 (Ray actor") and "died" in events[0]
    assert wait_dead([victim]) == []


@requires_ray
def test_state_saved_by_the_local_pool_resumes_exactly_on_ray(ray_instance) -> None:
    specs = [GameSpec(seed=5), GameSpec(seed=6)]
    actions = np.random.default_rng(2).integers(4, size=(40, 2))
    with PipePool(specs) as local:
        for _ in range(30):
            local.step(np.ones(2, np.int64))
        state = local.get_state()
        expected = [local.step(a) and local.observations.copy() for a in actions]
    with ray_pool(specs) as remote:
        remote.set_state(state)
        again = remote.get_state()  # and the actors' own state, set back: the pool contract's round trip (tests/test_pool.py)
        got = [remote.step(a) and remote.observations.copy() for a in actions]
        np.testing.assert_array_equal(np.stack(expected), np.stack(got))
        remote.set_state(again)
        np.testing.assert_array_equal(np.stack(got), np.stack([remote.step(a) and remote.observations.copy() for a in actions]))


@requires_ray
def test_close_kills_its_actors_but_not_a_ray_it_did_not_start(ray_instance) -> None:
    """The pool contract's close test (tests/test_pool.py) over Ray, and the Ray left running."""
    pool = ray_pool([GameSpec(seed=1), GameSpec(seed=2)])
    pids = pool.worker_pids()
    pool.close()
    pool.close()
    assert wait_dead(pids) == []
    assert ray_instance.is_initialized()
    with pytest.raises(RuntimeError, match="closed"):
        pool.step(np.zeros(2, np.int64))


@requires_ray
def test_actors_that_cannot_all_fit_time_out_with_the_cpus_asked_and_had(ray_instance) -> None:
    """2 actors of 2 CPUs each on the instance's 2: the second never starts. The timeout says why in
    the pool's own numbers, and the actor that did start is closed with the pool."""
    from game.vector.ray_actors import RayPool

    with pytest.raises(WorkerTimeout) as timeout:
        RayPool([GameSpec(seed=1), GameSpec(seed=2)], cpus_per_worker=2.0, start_timeout_s=0.25)
    # Which of the two gets the CPUs is Ray's choice.
    assert re.fullmatch(r"worker [01] did not answer within 0.25 s: the pool asks Ray for 2 actors × 2 CPUs = 4 CPUs and "
                        r"the cluster has 2; add nodes or lower --ray-cpus-per-worker", str(timeout.value)), timeout.value
    deadline = time.monotonic() + 60
    while ray_instance.available_resources().get("CPU") != 2:  # the event: the started actor's CPUs are back
        assert time.monotonic() < deadline, ray_instance.available_resources()
        time.sleep(0.1)


@requires_ray
def test_dead_actor_surfaces_as_worker_died_naming_it(ray_instance) -> None:
    # The pool contract's killed-worker test (tests/test_pool.py) over Ray, and the actor named. The
    # error's type is the proof: a death noticed only by the (here 10-minute) timeout would be a WorkerTimeout.
    with ray_pool([GameSpec(seed=1), GameSpec(seed=2)], timeout_s=600) as pool:
        actor_id = pool.worker_info()[0]["actor_id"]
        os.kill(pool.worker_pids()[0], signal.SIGKILL)
        with pytest.raises(WorkerDied, match=f"worker 0 \\(Ray actor {actor_id}.*\\) died"):
            pool.step(np.zeros(2, np.int64))
        pids = pool.worker_pids()
    assert wait_dead(pids) == []


@requires_ray
def test_cli_on_a_private_ray_listens_on_loopback_only_and_leaves_no_process_behind(cli, tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI starts its own Ray (gcs, raylet, agents, actors): all of them carry the marker. Held
    after update 1, the run's processes are read from the process table and a client tries Ray's
    own client code on it, then it trains on. The shell turned authentication off and holds another
    cluster's token, as one set up for that cluster might: the private Ray ignores both."""
    shell_token = "0" * 64
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_AUTH_TOKEN", shell_token)
    hold = tmp_path / "held"
    process = cli.start_held(hold, "--backend", "ray", "--updates", "2", "--n-workers", "2", "--worker-steps", "16",
                             "--data-dir", str(tmp_path / "runs"), until="release")
    try:
        ray = snapshot(cli.marker)
        refused = attack(ray.gcs_address, cli.marker, tmp_path / "attacker", token=shell_token)
    finally:
        hold.with_suffix(".go").touch()
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    check_private(ray)
    assert any(program.startswith("ray::EnvActor") for program in ray.listening_programs())  # the actors were seen
    check_refused(*refused)
    summary = summary_of(out)
    assert summary["status"] == "completed" and summary["updates"] == 2 and summary["env_steps"] == 2 * 2 * 16
    assert summary["worker_restarts"] == 0
    assert cli.leftovers() == []
    assert not ray.token_path.parent.exists()


# A driver's connection to a private Ray, and a real SIGINT the moment ray.shutdown begins, as a
# person's Ctrl-C can land while a sweep or a population stops.
CTRL_C_AS_RAY_STOPS = """
import os, signal, sys
from experiments.run.stopping import signals_stop_as_ctrl_c
from ray_setup.connection import RayConnection

signals_stop_as_ctrl_c()

def ctrl_c_as_ray_stops(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "shutdown" and frame.f_code.co_filename.endswith("worker.py"):
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGINT)

try:
    with RayConnection(None, 1, env={"SET_FOR_THE_TASKS": "yes"}) as connection:
        print("connected", connection.ray.is_initialized(), flush=True)
        sys.setprofile(ctrl_c_as_ray_stops)
except KeyboardInterrupt as e:
    print("stopped after the exit:", e, flush=True)
print("environment", os.environ.get("SET_FOR_THE_TASKS"), "ray", sys.modules["ray"].is_initialized(), flush=True)
"""


@requires_ray
def test_a_ctrl_c_while_ray_shuts_down_is_taken_after_it_and_everything_is_put_back(cli) -> None:
    """The Ctrl-C raised inside ray.shutdown: Ray half stopped, and the connection's undo (the
    environment it set for the tasks; on a cluster, fd 2 and Ray's patches) never ran. It is held
    until the connection has stopped Ray and put everything back, then taken as it would have been."""
    result = forked_run.run([sys.executable, "-c", CTRL_C_AS_RAY_STOPS], cwd=REPO, env=cli.env(), text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["connected True", "stopped after the exit: ", "environment None ray False"], result.stderr[-3000:]
    assert cli.leftovers() == []


# A driver's loop over one task that, asked to stop, never returns (as one on a node that went
# with the head): a person's Ctrl-C asks it to stop, then the head goes. The head is a port this
# script holds, watched by the connection's own HeadWatch; the tasks run on a private Ray.
HEAD_LOST_WHILE_STOPPING = """
import contextlib, os, signal, socket, sys, threading, time
from pathlib import Path
from experiments.ray_tasks import run_tasks
from experiments.run.stopping import signals_stop_as_ctrl_c
from ray_setup.connection import RayConnection
from ray_setup.head_watch import HeadWatch

marks = Path(sys.argv[1])
signals_stop_as_ctrl_c()

def never_returns(marks):
    (marks / "started").touch()
    while True:
        try:
            time.sleep(0.05)  # Ray's stop is raised between two lines, as in a run
        except KeyboardInterrupt:  # asked to stop: its node is gone, so no answer comes
            (marks / "asked").touch()

def wait_for(name):
    while not (marks / name).exists():
        time.sleep(0.05)

head = socket.create_server(("127.0.0.1", 0))

def answer():  # as a live head's port: each look is taken, until the head goes
    with contextlib.suppress(OSError):
        while True:
            head.accept()[0].close()

threading.Thread(target=answer, daemon=True).start()
with RayConnection(None, 1) as connection:
    connection.watch = HeadWatch(f"127.0.0.1:{head.getsockname()[1]}", period_s=0.1).start()
    task = connection.ray.remote(max_calls=1)(never_returns).options(num_cpus=1, max_retries=0)

    def person_then_head():
        wait_for("started")
        os.kill(os.getpid(), signal.SIGINT)
        wait_for("asked")
        head.shutdown(socket.SHUT_RDWR)  # the port refuses from here
        head.close()

    threading.Thread(target=person_then_head, daemon=True).start()
    scheduled = run_tasks(connection, task, [(0, (marks,))], 1)
    print(scheduled.ending.name, len(scheduled.ends), flush=True)
"""


@requires_ray
def test_a_head_lost_while_a_person_s_stop_waits_for_the_tasks_ends_the_wait_as_a_lost_head(cli, tmp_path: Path) -> None:
    """The stop waited for its tasks with no end: a head lost meanwhile left the driver waiting
    until Ray's client ended it, a minute later, with none of the lines that say how to go on. The
    wait now ends when the head goes, and the ending is the lost head (its line has the command to
    go on), not a person's stop."""
    result = forked_run.run([sys.executable, "-c", HEAD_LOST_WHILE_STOPPING, str(tmp_path)], cwd=REPO, env=cli.env(), text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["HEAD_LOST 0"], result.stderr[-3000:]
    assert cli.leftovers() == []


@pytest.mark.parametrize(("args", "expected"), [
    (["--backend", "mpi"], "--backend mpi: expected one of local, ray"),
    (["--ray-address", "auto"], "--ray-address auto: expected to be given with --backend ray"),
    (["--backend", "ray", "--ray-address", "not an address"], "--ray-address not an address: expected auto, HOST:PORT"),
    (["--backend", "ray", "--ray-cpus-per-worker", "0"], "--ray-cpus-per-worker 0.0: expected a number > 0"),
])
def test_bad_backend_options_are_one_line_and_exit_2(args: list[str], expected: str, tmp_path: Path, capsys) -> None:
    if "--backend" in args and "ray" in args and not ray_installed():
        expected = "expected Ray installed"
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--data-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err


def test_backend_ray_without_ray_says_how_to_install_it(tmp_path: Path) -> None:
    # A real interpreter where `import ray` fails (sys.modules entry None: Python's own way to
    # block a module), running the real command line.
    code = ("import sys; sys.modules['ray'] = None; from experiments.breakout import main; "
            f"main(['--backend', 'ray', '--data-dir', {str(tmp_path)!r}])")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2
    assert result.stderr.strip() == 'error: --backend ray: expected Ray installed for it: pip install -e ".[ray]"'
    assert list(tmp_path.iterdir()) == []


@requires_ray
@pytest.mark.parametrize("module", ["experiments.breakout", "experiments.sweep"])
def test_a_cluster_address_where_nothing_answers_is_refused_in_one_line_before_anything_starts(
        module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Port 1 of loopback: refused at once, without Ray's 40 s of tries to reach a GCS."""
    import importlib

    for name in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):  # a driver sets them: given back after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    args = ["--backend", "ray"] if module == "experiments.breakout" else ["--grid", "learning_rate=1e-4,3e-4"]
    line = refused_in_process(capsys, [*args, "--ray-address", "127.0.0.1:1", "--data-dir", str(tmp_path / "runs")],
                              importlib.import_module(module).main)
    assert line == "error: --ray-address 127.0.0.1:1: expected a running Ray cluster's address (nothing answers at 127.0.0.1:1: Connection refused)"
    assert not (tmp_path / "runs").exists()


OLDER = ('Ray 2.60 or newer, whose private instance listens on loopback only and refuses clients without its token '
         '(this is Ray 2.58.0): pip install -e ".[ray]"')


@requires_ray
@pytest.mark.parametrize(("module", "args", "expected"), [
    ("experiments.breakout", ["--backend", "ray"], f"error: --backend ray: expected {OLDER}"),
    ("experiments.sweep", ["--grid", "learning_rate=1e-4,3e-4"], f"error: sweeps run on Ray: expected {OLDER}"),
    ("experiments.pbt", ["--population", "2", "--interval", "1"], f"error: populations run on Ray: expected {OLDER}"),
])
def test_a_ray_older_than_2_60_is_refused_in_one_line_before_anything_starts(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                             module: str, args: list[str], expected: str) -> None:
    """Ray 2.58 let a client without a token replace a sweep's trial function: the commands refuse
    it. The installed Ray's metadata, crafted: a ray-2.58.0.dist-info first on the path."""
    crafted = tmp_path / "older"
    (crafted / "ray-2.58.0.dist-info").mkdir(parents=True)
    (crafted / "ray-2.58.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ray\nVersion: 2.58.0\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(crafted), os.environ.get("PYTHONPATH", "")]))
    result = cli.run(module, *args, "--data-dir", str(tmp_path / "runs"))
    assert (result.returncode, result.stdout, result.stderr.strip()) == (2, "", expected)
    assert not (tmp_path / "runs").exists() and cli.leftovers() == []


def test_joining_a_cluster_first_makes_this_users_token_file_0600_and_nothing_else(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`ray start` writes ~/.ray/auth_token with the umask's mode (0644): other accounts could read
    the cluster's token. A file of another account's, and a link, are left as they are."""
    mine, theirs, link = tmp_path / "auth_token", tmp_path / "theirs", tmp_path / "link"
    for path in (mine, theirs):
        path.write_text("0" * 64)
        path.chmod(0o644)
    link.symlink_to(theirs)
    if os.getuid() == 0:
        os.chown(theirs, 65534, 65534)  # nobody's
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    for path in (link, theirs, mine):
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
        tighten_token_file()
    assert (stat.S_IMODE(mine.stat().st_mode), stat.S_IMODE(theirs.stat().st_mode)) == (0o600, 0o644 if os.getuid() == 0 else 0o600)
    monkeypatch.setenv("HOME", str(tmp_path))  # no RAY_AUTH_TOKEN_PATH: Ray's default, ~/.ray/auth_token
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    (tmp_path / ".ray").mkdir()
    default = tmp_path / ".ray" / "auth_token"
    default.write_text("0" * 64)
    default.chmod(0o640)
    tighten_token_file()
    assert stat.S_IMODE(default.stat().st_mode) == 0o600


@requires_ray
def test_make_pool_picks_the_backend_the_config_names(ray_instance) -> None:
    from game.vector.ray_actors import RayPool

    specs = [GameSpec(seed=1), GameSpec(seed=2)]
    with make_pool(PPOConfig(n_workers=2), specs) as local:
        assert type(local) is PipePool
    with make_pool(PPOConfig(n_workers=2, backend="ray", ray_cpus_per_worker=0.5), specs) as remote:
        assert type(remote) is RayPool and remote.n_workers == 2 and remote.n_actions == local.n_actions
