"""The worker pool: real processes, real games, shared-memory frames."""

import os
import signal
import time

import numpy as np
import pytest

from experiments.process_table import is_alive
from game.atari import Game, GameSpec
from game.pool import PipePool, WorkerDied, WorkerError, WorkerTimeout


def specs(n: int) -> list[GameSpec]:
    return [GameSpec(seed=100 + i) for i in range(n)]


def test_pool_matches_local_games_step_for_step() -> None:
    # Two workers × two games each: the shared-memory observations, rewards and done flags must
    # be exactly what the same games produce in this process.
    local = [Game(s) for s in specs(4)]
    actions = np.random.default_rng(0).integers(4, size=(150, 4))
    with PipePool(specs(4), envs_per_worker=2) as pool:
        assert pool.n_workers == 2 and pool.n_envs == 4 and pool.n_actions == 4
        np.testing.assert_array_equal(pool.observations, np.stack([g.observation for g in local]))
        for step_actions in actions:
            batch = pool.step(step_actions)
            results = [g.step(int(a)) for g, a in zip(local, step_actions, strict=True)]
            np.testing.assert_array_equal(pool.observations, np.stack([g.observation for g in local]))
            np.testing.assert_array_equal(batch.rewards, [r.reward for r in results])
            np.testing.assert_array_equal(batch.terminals, [r.terminal for r in results])
            assert sorted(batch.episodes) == sorted((i, r.episode) for i, r in enumerate(results) if r.episode)
        assert pool.observations.dtype == np.uint8


def test_workers_never_import_torch() -> None:
    import torch  # noqa: F401  (the trainer has it; the workers must not)

    with PipePool(specs(2)) as pool:
        assert [info["torch_imported"] for info in pool.worker_info()] == [False, False]


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policy")
def test_workers_are_batch_jobs_and_the_trainer_is_not() -> None:
    with PipePool(specs(2)) as pool:
        assert [os.sched_getscheduler(pid) for pid in pool.worker_pids()] == [os.SCHED_BATCH] * 2
        assert [info["scheduler"] for info in pool.worker_info()] == [os.SCHED_BATCH] * 2
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_exception_in_worker_reaches_trainer_with_traceback_and_worker_id() -> None:
    with PipePool(specs(4), envs_per_worker=2) as pool:
        pids = pool.worker_pids()
        with pytest.raises(WorkerError) as error:
            pool.step(np.array([0, 0, 0, 9]))  # no action 9: IndexError inside worker 1
        assert error.value.worker == 1
        assert "worker 1 raised IndexError" in str(error.value)
        assert "game/atari.py" in str(error.value) and "Traceback" in str(error.value)
        pool.step(np.zeros(4, np.int64))  # the protocol is still in step for everyone
    assert not any(is_alive(pid) for pid in pids)


def test_killed_worker_is_noticed_at_once() -> None:
    with PipePool(specs(2), timeout_s=60) as pool:
        os.kill(pool.worker_pids()[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerDied, match="worker 1 died") as error:
            pool.step(np.zeros(2, np.int64))
        assert time.monotonic() - start < 5
        assert error.value.exitcode == -signal.SIGKILL
        pids = pool.worker_pids()
    assert not any(is_alive(pid) for pid in pids)


def test_hung_worker_times_out_and_is_cleaned_up() -> None:
    with PipePool(specs(2), timeout_s=1.0) as pool:
        hung = pool.worker_pids()[0]
        os.kill(hung, signal.SIGSTOP)
        with pytest.raises(WorkerTimeout, match="worker 0 did not answer"):
            pool.step(np.zeros(2, np.int64))
    assert not is_alive(hung)  # close() terminated (then killed) what would not stop


def test_restarted_worker_serves_with_new_seeds() -> None:
    with PipePool(specs(2)) as pool:
        old_pid = pool.worker_pids()[0]
        os.kill(old_pid, signal.SIGKILL)
        with pytest.raises(WorkerDied):
            pool.step(np.zeros(2, np.int64))
        pool.restart_worker(0, seed_offset=1000)
        assert pool.worker_pids()[0] != old_pid and pool.specs[0].seed == 1100
        pool.step(np.ones(2, np.int64))


def test_state_round_trip_through_workers() -> None:
    with PipePool(specs(2)) as pool:
        for _ in range(20):
            pool.step(np.ones(2, np.int64))
        state = pool.get_state()
        actions = np.random.default_rng(1).integers(4, size=(40, 2))
        first = [pool.step(a) and pool.observations.copy() for a in actions]
        pool.set_state(state)
        second = [pool.step(a) and pool.observations.copy() for a in actions]
        np.testing.assert_array_equal(np.stack(first), np.stack(second))


def test_close_is_idempotent_and_leaves_nothing() -> None:
    pool = PipePool(specs(3))
    pids = pool.worker_pids()
    pool.close()
    pool.close()
    assert not any(is_alive(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        pool.step(np.zeros(3, np.int64))
