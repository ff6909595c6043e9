"""The pool contract, run over every transport: local processes (`pipe`), the in-process `serial`
pool and Ray actors (`ray`, marked `ray`). Real games everywhere; real processes, real signals
where a transport has processes. Five parts of the contract are checked over Ray by a test of
tests/test_ray.py that asserts more of the same pool (torch never imported, an exception's report,
a killed worker noticed at once, the state's round trip, close): those run here over the local
transports only (LOCAL_ONLY), as every Ray actor is a process of its own to start.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import numpy as np
import pytest

from game.atari import Game, GameSpec
from game.vector import EnvPool, PipePool, RestartPolicy, SerialPool, WorkerDied, WorkerError, WorkerKeepsFailing, WorkerTimeout
from game.vector.pool import RESEED_STRIDE
from ray_setup.installed import ray_installed
from tests.process_table import is_alive

PoolFactory = Callable[..., EnvPool]
PROCESS_TRANSPORTS = ["pipe", pytest.param("ray", marks=[pytest.mark.ray, pytest.mark.skipif(not ray_installed(), reason="Ray is not installed")])]
TRANSPORTS = ["serial", *PROCESS_TRANSPORTS]
LOCAL_ONLY = ["serial", "pipe"]  # the Ray transport's check of the same is in tests/test_ray.py, named at each use


@pytest.fixture
def make(request: pytest.FixtureRequest) -> PoolFactory:
    """The transport under test, as a pool factory taking (specs, envs_per_worker, timeout_s, restarts)."""
    if request.param == "pipe":
        return PipePool
    if request.param == "serial":
        return SerialPool
    request.getfixturevalue("ray_instance")
    from game.vector.ray_actors import RayPool

    # Half a CPU each: the replacement of a killed actor must fit next to the survivors on 2 CPUs.
    return lambda *args, **kwargs: RayPool(*args, **kwargs, cpus_per_worker=0.5)


def specs(n: int) -> list[GameSpec]:
    return [GameSpec(seed=100 + i) for i in range(n)]


def wait_dead(pids: list[int], timeout_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if is_alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("make", TRANSPORTS, indirect=True)
def test_pool_matches_local_games_step_for_step(make: PoolFactory) -> None:
    # Two workers × two games each: the observations, rewards and done flags must be exactly what
    # the same games produce in this process, through every transport.
    local = [Game(s) for s in specs(4)]
    actions = np.random.default_rng(0).integers(4, size=(150, 4))
    with make(specs(4), envs_per_worker=2) as pool:
        assert pool.n_workers == 2 and pool.n_envs == 4 and pool.n_actions == 4
        np.testing.assert_array_equal(pool.observations, np.stack([g.observation for g in local]))
        for t, step_actions in enumerate(actions):
            if t == 75:  # a ping (the round trip measured by tools/node_crossing.py) steps no game
                pool.ping()
                pool.ping([1])
            batch = pool.step(step_actions)
            results = [g.step(int(a)) for g, a in zip(local, step_actions, strict=True)]
            np.testing.assert_array_equal(pool.observations, np.stack([g.observation for g in local]))
            np.testing.assert_array_equal(batch.rewards, [r.reward for r in results])
            np.testing.assert_array_equal(batch.terminals, [r.terminal for r in results])
            assert batch.episodes == [(i, r.episode) for i, r in enumerate(results) if r.episode]
        assert pool.observations.dtype == np.uint8


@pytest.mark.parametrize("make", TRANSPORTS, indirect=True)
def test_games_ending_on_the_same_step_are_reported_in_env_order(make: PoolFactory) -> None:
    # Four copies of one game, one per worker, given the same actions: every game ends on the same
    # step, and the replies race. The report must not depend on which worker answered first, or
    # games.csv and the score window would differ between two runs of one seed. Truncated at 200
    # frames (50 steps), they end 3 times within 150 steps instead of about 500 (lost lives): the
    # pool reports a truncated game by the same path as one that is over.
    same = [GameSpec(seed=5, noop_max=0, max_episode_frames=200)] * 4
    ends = 0
    with make(same, envs_per_worker=1) as pool:
        for a in np.random.default_rng(1).integers(4, size=2000):
            episodes = pool.step(np.full(4, a)).episodes
            if episodes:
                assert [env for env, _ in episodes] == [0, 1, 2, 3] and len({e for _, e in episodes}) == 1
                ends += 1
                if ends == 3:
                    break
    assert ends == 3


@pytest.mark.parametrize("make", TRANSPORTS, indirect=True)
def test_halves_step_while_the_caller_works(make: PoolFactory) -> None:
    # step_async/step_wait over two halves (the trainer's double buffering) = stepping all at once,
    # here on the in-process pool (the same games as every transport's whole step, as the test above proves).
    actions = np.random.default_rng(2).integers(4, size=(60, 4))
    with make(specs(4), envs_per_worker=2) as halves, SerialPool(specs(4), envs_per_worker=2) as whole:
        for step_actions in actions:
            halves.step_async(step_actions[:2], range(0, 1))
            halves.step_async(step_actions[2:], range(1, 2))
            first, second = halves.step_wait(range(0, 1)), halves.step_wait(range(1, 2))
            both = whole.step(step_actions)
            np.testing.assert_array_equal(np.concatenate([first.rewards, second.rewards]), both.rewards)
            assert sorted(first.episodes + second.episodes) == sorted(both.episodes)
        np.testing.assert_array_equal(halves.observations, whole.observations)
        with pytest.raises(RuntimeError, match="not started"):
            halves.step_wait(range(0, 1))


@pytest.mark.parametrize("make", ["pipe"], indirect=True)  # Ray: test_actors_never_import_torch_and_report_where_they_run
def test_workers_never_import_torch(make: PoolFactory) -> None:
    import torch  # noqa: F401  (the trainer has it; the workers must not)

    with make(specs(2)) as pool:
        assert [info["torch_imported"] for info in pool.worker_info()] == [False, False]


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policy")
def test_local_workers_are_batch_jobs_and_the_trainer_is_not() -> None:
    with PipePool(specs(2)) as pool:
        assert [os.sched_getscheduler(pid) for pid in pool.worker_pids()] == [os.SCHED_BATCH] * 2
        assert [info["scheduler"] for info in pool.worker_info()] == [os.SCHED_BATCH] * 2
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


@pytest.mark.parametrize("make", LOCAL_ONLY, indirect=True)  # Ray: test_exception_in_an_actor_names_worker_and_actor_with_traceback
def test_exception_in_worker_reaches_trainer_with_traceback_and_worker_id(make: PoolFactory) -> None:
    with make(specs(4), envs_per_worker=2) as pool:
        pids = pool.worker_pids()
        with pytest.raises(WorkerError) as error:
            pool.step(np.array([0, 0, 0, 9]))  # no action 9: IndexError inside worker 1
        assert error.value.worker == 1
        assert "worker 1 raised IndexError" in str(error.value)
        assert "--- traceback in worker 1 ---" in str(error.value) and 'game/atari.py", line' in str(error.value)
        pool.step(np.zeros(4, np.int64))  # the protocol is still in step for everyone
    if pids != [os.getpid()] * 2:
        assert wait_dead(pids) == []


@pytest.mark.parametrize("make", ["pipe"], indirect=True)  # Ray: test_dead_actor_surfaces_as_worker_died_naming_it
def test_killed_worker_is_noticed_at_once(make: PoolFactory) -> None:
    # The error's type is the proof: a death noticed only by the (here 10-minute) timeout would be a WorkerTimeout.
    with make(specs(2), timeout_s=600) as pool:
        victim = pool.worker_pids()[1]
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(WorkerDied, match=r"worker 1 .*died") as error:
            pool.step(np.zeros(2, np.int64))
        if isinstance(pool, PipePool):
            assert error.value.exitcode == -signal.SIGKILL
        pids = pool.worker_pids()
    assert wait_dead(pids) == []


@pytest.mark.parametrize("make", PROCESS_TRANSPORTS, indirect=True)
def test_hung_worker_times_out_and_is_cleaned_up(make: PoolFactory) -> None:
    with make(specs(2), timeout_s=1.0) as pool:
        hung = pool.worker_pids()[0]
        os.kill(hung, signal.SIGSTOP)
        try:
            with pytest.raises(WorkerTimeout, match="worker 0 did not answer"):
                pool.step(np.zeros(2, np.int64))
            pool.timeout_s = 600  # the replacement may be slow to start on a busy machine: not a hang
            pool.restart_worker(0, seed_offset=10)  # the hung one is killed, a new one serves
            pool.step(np.zeros(2, np.int64))
            assert pool.worker_pids()[0] != hung
        finally:
            if is_alive(hung):
                os.kill(hung, signal.SIGCONT)
    assert wait_dead([hung]) == []


@pytest.mark.parametrize("make", TRANSPORTS, indirect=True)
def test_restarted_worker_serves_with_new_seeds(make: PoolFactory) -> None:
    with make(specs(2)) as pool:
        with pytest.raises(WorkerError):
            pool.step(np.array([9, 0]))
        pool.restart_worker(0, seed_offset=1000)
        assert pool.specs[0].seed == 1100 and pool.specs[1].seed == 101
        # The new worker plays the game of its new seed, from its start.
        np.testing.assert_array_equal(pool.observations[0], Game(GameSpec(seed=1100)).observation)
        pool.step(np.ones(2, np.int64))


@pytest.mark.parametrize("make", TRANSPORTS, indirect=True)
def test_failures_are_replaced_within_the_restart_policy(make: PoolFactory) -> None:
    # Worker 1 raises on every step (no action 9): replaced with seeds shifted by k × the stride,
    # until it has failed more than max_restarts times within the window.
    with make(specs(2), restarts=RestartPolicy(max_restarts=2, window=100)) as pool:
        reported: list[str] = []
        pool.on_restart = reported.append
        with pytest.raises(WorkerKeepsFailing, match=r"worker 1 failed 3 times within 100 updates \(limit 2\)"):
            pool.with_restarts(lambda: pool.step(np.array([0, 9])), tick=7)
        assert pool.restarts == 2
        assert pool.specs[1].seed == 101 + RESEED_STRIDE + 2 * RESEED_STRIDE and pool.specs[0].seed == 100
        assert len(reported) == 2
        for k, message in enumerate(reported, start=1):
            # A Ray actor's replacement also says where it went (its node's name: ray_setup/nodes.py).
            where = pool.where(1)
            assert message.startswith("worker 1 raised IndexError") and message.endswith(f"; replaced it (restart {k}){where} during update 8")
        # Failures older than the window are forgiven: at tick 200 the budget is whole again.
        calls = iter([np.array([0, 9]), np.array([0, 0])])
        pool.with_restarts(lambda: pool.step(next(calls)), tick=200)
        assert pool.restarts == 3


@pytest.mark.parametrize("make", LOCAL_ONLY, indirect=True)  # Ray: test_state_saved_by_the_local_pool_resumes_exactly_on_ray
def test_state_round_trip_through_workers(make: PoolFactory) -> None:
    with make(specs(2)) as pool:
        for _ in range(20):
            pool.step(np.ones(2, np.int64))
        state = pool.get_state()
        actions = np.random.default_rng(1).integers(4, size=(40, 2))
        first = [pool.step(a) and pool.observations.copy() for a in actions]
        pool.set_state(state)
        second = [pool.step(a) and pool.observations.copy() for a in actions]
        np.testing.assert_array_equal(np.stack(first), np.stack(second))


@pytest.mark.parametrize("make", LOCAL_ONLY, indirect=True)  # Ray: test_close_kills_its_actors_but_not_a_ray_it_did_not_start
def test_close_is_idempotent_and_leaves_nothing(make: PoolFactory) -> None:
    pool = make(specs(3))
    pids = pool.worker_pids()
    pool.close()
    pool.close()
    if pids != [os.getpid()] * 3:
        assert wait_dead(pids) == []
    with pytest.raises(RuntimeError, match="closed"):
        pool.step(np.zeros(3, np.int64))
