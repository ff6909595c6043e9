"""A short labml run whose first score lies far below the rest (run as a subprocess, never imported
by pytest): the score's chart must still draw every point inside its axes.

    python short_run.py

It tracks `score_mean_100` (the series the run page charts) at 32 steps, 256 apart as a Breakout
run's are: 0.0 first, then 2.0 to 2.3, as a run whose first game scored nothing. labml's own
client and nothing of this project, as any labml experiment.
"""

from __future__ import annotations

from labml import experiment, tracker

SCORES = [0.0] + [2.0 + 0.01 * (i % 31) for i in range(1, 32)]


def main() -> None:
    experiment.create(name="short", writers={"app"})
    experiment.configs({"gamma": 0.99})
    with experiment.start():
        print(f"RUN_UUID={experiment.get_uuid()}", flush=True)
        for i, score in enumerate(SCORES):
            tracker.save((i + 1) * 256, {"score_mean_100": score})
    print("FINISHED", flush=True)  # labml's sender delivers everything before the interpreter exits


if __name__ == "__main__":
    main()
