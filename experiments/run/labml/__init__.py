"""Every line of the training process that touches labml, behind one object: `LabmlRun`.

The run (experiments/run/lifecycle.py) talks to labml through a handful of calls: create the run
with its configs, start it, read the live values, report an update, finish with a status. labml
keeps the run's folder (`data_dir/<name>/<uuid>/`), its configs and metrics, and sends them to a
dashboard when one is named; the dashboard is reached over HTTP only, as any labml experiment
reaches it. Private parts of labml that are replaced, each because labml has no setting for it,
are in this folder alone: its sender (sender.py), its console (console.py), its dynamic
hyperparameters (live.py). Recheck them on a labml upgrade; tests/test_console.py and
tests/dashboard/ fail when one moves.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from labml import experiment, monit, tracker
from labml.internal.computer.configs import computer_singleton
from labml.internal.experiment import experiment_singleton
from labml.internal.lab import lab_singleton
from labml.internal.monitor import monitor_singleton

from configs.ppo import LiveValues, PPOConfig
from configs.urls import strip_userinfo
from experiments.run.labml.console import console_through
from experiments.run.labml.history import Row, send_history
from experiments.run.labml.live import LiveHyperParams
from experiments.run.labml.sender import finish_sending, harden_sender

# What labml's screen would print; the terminal shows our progress line instead (progress.py).
PRINTED_METRICS = ("score_mean_100", "policy_loss", "value_loss", "entropy", "approx_kl", "sps")


def run_title(config: PPOConfig) -> str:
    """The run's name in labml and on the dashboard: its game, and the `--name` the user gave
    (`Pong`, `Pong · lr-sweep`); the default name is only the folder."""
    return config.game if config.name == PPOConfig().name else f"{config.game} · {config.name}"


class LabmlRun:
    """The run as labml keeps it. `say` prints a line for the person running it."""

    def __init__(self, config: PPOConfig, say: Callable[[str], None]) -> None:
        self.config, self.say = config, say
        self.live: LiveHyperParams | None = None

    def console(self) -> AbstractContextManager[None]:
        """While inside, labml's own messages come as whole lines through `say`, without its banner."""
        return console_through(self.say)

    def create(self, run_uuid: str | None, live_values: Mapping[str, float] | None,
               machine_choices: Mapping[str, str], label: str | None = None) -> tuple[str, Path]:
        """Create the run (`run_uuid` None: a new one) with its configs and, as labml's comment, what
        it is part of (`label`: the dashboard lists it beside the run); returns its uuid and folder."""
        config = self.config
        # An absolute experiments_path puts runs under data_dir while labml's project root (found
        # through .labml.yaml) stays this repository, so each run records the code's git commit.
        url = harden_sender(config.dashboard, dict(machine_choices), self.say) if config.dashboard else None
        lab_singleton().set_configurations({"experiments_path": str(Path(config.data_dir).resolve()),
                                            "app_url": url, "app_open_browser": False})
        experiment.create(name=config.name, uuid=run_uuid, comment=label,
                          writers={"screen", "app"} if config.dashboard else {"screen"})
        # labml read the project's git remotes in create(); run.yaml and the dashboard get them at
        # start(). A credential in a remote URL (https://user:token@host/…) is dropped in between.
        run = experiment_singleton().run
        run.repo_remotes = [strip_userinfo(remote) for remote in run.repo_remotes]
        run.name = run_title(config)  # the folder is `name`; the name listed says which game it plays
        self.live = LiveHyperParams(config, dict(live_values) if live_values else None, self.say)
        # Values that differ from the defaults are labml's overrides, so the dashboard lists them as
        # this run's explicitly set hyperparameters; a live key goes in as its DynamicHyperParam.
        labml_configs = self.live.labml_configs(config)
        changed = {k: labml_configs[k] for k in config.non_defaults()}
        if config.dashboard is not None:
            changed["dashboard"] = strip_userinfo(config.dashboard)
        experiment.configs(labml_configs, changed)
        for name in PRINTED_METRICS:
            tracker.set_scalar(name, is_print=True)
        tracker.set_scalar("*", is_print=False)
        uuid = experiment.get_uuid()
        return uuid, lab_singleton().experiments / config.name / uuid

    def start(self, env_steps: int, history: tuple[Callable[[], list[Row]], int] | None) -> None:
        """Start sending: a resumed run's `history` first (a reader of its updates.csv, and the
        update to send up to), so a dashboard that joins late shows the whole run."""
        monitor_singleton().silent()  # labml's own progress line: ours is shown instead
        if self.config.dashboard and history is not None:
            send_history(self.config.dashboard, experiment.get_uuid(), *history, self.say)
        # start() registers the project in the user's labml folder by listing it and deleting the
        # duplicates it finds; two runs starting at once (a sweep's trials, a population's members)
        # could each delete a file the other was reading. One lock around it, shared by our runs.
        with (computer_singleton().config_folder / "projects.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            experiment.start()  # its end is reported by `finish`, with the run's real status
        tracker.set_global_step(env_steps)

    def updates(self, first: int, last: int) -> Iterable[int]:
        """Update numbers `first` … `last - 1`, counted by labml's loop."""
        loop: Iterable[int] = monit.loop(range(first, last))
        return loop

    def live_values(self) -> LiveValues:
        """The live hyperparameters now (each tracked as `hp.<name>`, which the dashboard shows)."""
        assert self.live is not None, "create() first"
        return self.live.values()

    def live_bases(self) -> LiveValues:
        """The live hyperparameters now, untracked: what a checkpoint keeps."""
        assert self.live is not None, "create() first"
        return self.live.bases()

    def report(self, env_steps: int, metrics: Mapping[str, float]) -> None:
        tracker.save(env_steps, dict(metrics))

    def finish(self, status: str, error: str | None) -> bool:
        """Record how the run ended (labml's `with experiment.start()` would call a Ctrl-C'd run
        "completed"), then wait at most `--dashboard-wait` for the sender; False if it gave up."""
        experiment_singleton().finish(status, error)
        return not self.config.dashboard or finish_sending(self.config.dashboard_wait, self.say)
