"""A tiny labml run for the dashboard tests (run as a subprocess, never imported by pytest).

    python probe_run.py STEPS [--until KEY=VALUE] [--finish-timeout S] [--comment TEXT]

It registers dict configs with dynamic hyperparameters, tracks a metric every step
and prints the values it sees.  With --until it keeps going (up to STEPS) until the
hyperparameter KEY takes VALUE, which is how the tests watch a live change arrive. --comment
is labml's comment, as a sweep names its trials ("NAME trial 2").

Without --finish-timeout it is any labml experiment: labml's own client and nothing of this
project (as labml_nn's PPO is), exiting once labml's sender has delivered everything. With it, the
run's end waits for the sender as a training run of ours does (experiments/run/labml/sender.py).
"""

from __future__ import annotations

import argparse
import math
import time

from labml import experiment, tracker

# labml 0.5.3 does not re-export these from labml.configs.
from labml.internal.configs.dynamic_hyperparam import FloatDynamicHyperParam, IntDynamicHyperParam


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--until", default=None)
    parser.add_argument("--finish-timeout", type=float, default=None)
    parser.add_argument("--comment", default="")
    args = parser.parse_args()

    conf: dict[str, float | int | FloatDynamicHyperParam | IntDynamicHyperParam] = {
        "learning_rate": FloatDynamicHyperParam(2.5e-4, (0.0, 1e-2)),
        "clip_range": FloatDynamicHyperParam(0.1, (0.0, 0.5)),
        "entropy_coef": FloatDynamicHyperParam(0.01, (0.0, 0.1)),
        "value_coef": FloatDynamicHyperParam(0.5, (0.0, 2.0)),
        "epochs": IntDynamicHyperParam(4, (1, 16)),
        "gamma": 0.99,
    }
    until_key, until_value = (args.until.split("=") if args.until else (None, None))
    experiment.create(name="probe", comment=args.comment, writers={"app", "screen"})
    experiment.configs(conf)
    with experiment.start():
        print(f"RUN_UUID={experiment.get_uuid()}", flush=True)
        for step in range(args.steps):
            seen = {k: conf[k]() for k in ("learning_rate", "clip_range", "entropy_coef", "value_coef", "epochs")}
            tracker.save(step, {"loss": math.exp(-step / 10)})
            print("STEP " + " ".join(f"{k}={v!r}" for k, v in [("step", step), *seen.items()]), flush=True)
            if until_key is not None and str(seen[until_key]) == until_value:
                print(f"SAW {until_key}={until_value}", flush=True)
                break
            time.sleep(0.1)
    if args.finish_timeout is None:  # labml's sender delivers everything before the interpreter exits
        print("FINISHED", flush=True)
        return
    from experiments.run.labml.sender import finish_sending

    delivered = finish_sending(args.finish_timeout, print)
    if not delivered:
        print(f"the dashboard did not take the last updates within {args.finish_timeout:g} s", flush=True)
    print(f"FINISHED delivered={delivered}", flush=True)


if __name__ == "__main__":
    main()
