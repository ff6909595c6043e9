"""Does a precision change what one PPO update learns, beyond what the minibatch order alone changes?
(a study's script, not one of the commands)

    python tools/precision_screen.py --checkpoints runs/screen/UUID/100k.pt … --precisions bf16 bf16-emulated

A learning curve takes hours and its seed spread hides a small bias; one update takes seconds and
can be repeated. From each checkpoint (a point of a real run) the script samples one rollout with
the checkpoint's policy (the run's own games, continued exactly) and a second one whose frames are
held out, then makes the same update many times, each from the checkpoint's parameters and Adam
state, and each with the rollout's log π_old and V_old as a run in that arithmetic would have
stored them while sampling (the same frames and actions):

  - in fp32 with the run's own minibatch order (the reference) and with `--orders` other orders;
  - in each `--precisions` arithmetic with each of those orders.

Two numbers say how far update a lands from update b, both read in fp32 arithmetic so that they
measure the parameters, not the forward pass's rounding:

  - `rel`: ‖θa − θb‖ / ‖θb − θ0‖, the distance between the two results relative to the update's size;
  - `kl`: the mean over the held-out frames of KL(π_b ‖ π_a).

The noise is fp32 against fp32 with another minibatch order: what a run's own shuffle already
changes. A precision passes the screen at a checkpoint when its deviation from fp32 (the same
order, averaged over the orders) is below the smallest such noise, on both numbers. The bias test
asks whether the precision moves the parameters systematically, not just differently: per order k,
d_k = Δθ(precision, k) − Δθ(fp32, k) projected on the mean fp32 step's direction, their mean
against its standard error (t), and as a share of that step (a bf16 that takes 1% shorter steps has
shrink = −0.01). When both bf16 and bf16-emulated are given, the script also shows the emulation's
distance from real bf16 against bf16's from fp32, per order, and, as the yardsticks of that
distance, fp32 and bf16 each in the other memory layout (channels-last or not) against itself in
the run's: the same arithmetic through other oneDNN kernels, which sum in other orders, as the
emulation's fp32 kernels do. Nothing is written to the run. The
last line printed is one JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from configs.cli import OneLineParser, docstring_help
from configs.fields import PRECISIONS
from configs.ppo import ConfigError, validate
from configs.refusals import bad_value
from experiments.evaluate import check_device_name, is_a_file, parse_device, read_checked
from experiments.run.console import say

PROG = "python tools/precision_screen.py"
OTHER_LAYOUT = " in the other layout"  # a precision's update with the other memory layout's kernels
ORDER_SEED = 10_007  # other minibatch orders: numpy streams seeded (ORDER_SEED, k), k = 1 … --orders


def parse_orders(text: str) -> int:
    if not (text.isdigit() and 2 <= int(text) <= 256):
        bad_value("--orders", text, "a whole number of other minibatch orders, 2 to 256")
    return int(text)


def parse_precision(text: str) -> str:
    if text not in PRECISIONS or text in ("auto", "fp32"):
        bad_value("--precisions", text, "bf16, bf16-emulated or bf16-then-fp32 (each is compared with fp32)")
    return text


def parse_checkpoint(text: str) -> Path:
    path = Path(text)
    if not is_a_file(path):
        bad_value("--checkpoints", text, f"a checkpoint file written by python -m experiments.breakout (no file at {path})")
    return path


def distances(torch: Any, theta: Any, reference: Any, start: Any, logits: Any, reference_logits: Any) -> dict[str, float]:
    """`rel` and `kl` (the module's docstring) of parameters `theta` (flat) from `reference`."""
    rel = float((theta - reference).norm() / (reference - start).norm())
    # In float64: the KL of two policies this close is ~1e-6, and fp32's rounding can make it negative.
    log_p, log_q = torch.log_softmax(reference_logits.double(), -1), torch.log_softmax(logits.double(), -1)
    kl = float((log_p.exp() * (log_p - log_q)).sum(-1).mean())
    return {"rel": rel, "kl": kl}


def bias(steps: list[Any], reference_steps: list[Any]) -> dict[str, float]:
    """The precision's mean step difference along the mean fp32 step (the module's docstring)."""
    mean_step = sum(reference_steps) / len(reference_steps)
    direction = mean_step / mean_step.norm()
    projected = [float((a - b) @ direction) for a, b in zip(steps, reference_steps, strict=True)]
    mean, spread = statistics.fmean(projected), statistics.stdev(projected)
    t = mean / (spread / math.sqrt(len(projected))) if spread > 0 else math.copysign(math.inf, mean) if mean else 0.0
    return {"t": t,
            "shrink": mean / float(mean_step.norm()), "orders": len(projected)}


def screen_checkpoint(path: Path, precisions: list[str], orders: int, device_name: str) -> dict[str, Any]:
    import numpy as np
    import torch

    from game.atari import is_known_game
    from game.vector import game_specs, make_pool
    from ppo.losses import log_probs_of
    from ppo.precision import arithmetic_at
    from ppo.seeding import derive_seeds
    from ppo.trainer import Trainer

    device = parse_device(device_name)
    point = read_checked(path)  # checked whole, as a resume checks it
    try:  # its games on worker processes here, whatever transport trained it; fp32 as the reference
        config = validate(dataclasses.replace(point.config, backend="local", ray_address=None, dashboard=None,
                                              precision="fp32"), is_known_game)
    except ConfigError as e:
        bad_value("--checkpoints", str(path), f"a checkpoint written by python -m experiments.breakout ({e})")
    live = point.checkpoint.live_values
    seeds = derive_seeds(config.seed, config.n_envs)
    with make_pool(config, game_specs(config, seeds.env_seeds)) as pool:
        trainer = Trainer(config, pool, seeds, device, live_values=lambda: live, on_event=say)
        trainer.load_state_dict(point.checkpoint)
        settings = trainer.schedule()  # the next update's, as the run would use them
        at_update, at_steps = trainer.update, trainer.env_steps
        if settings.learning_rate <= 0:  # nothing moves: no distance can be measured against the update's size
            bad_value("--checkpoints", str(path), f"a checkpoint whose next update learns (this one's has a learning rate "
                                                  f"of 0: update {at_update:,} of {config.n_updates:,}, its schedule's end)")
        trainer.collect()  # held out: frames the update never trains on, from the same policy
        held_out = torch.from_numpy(trainer.rollout.observations.reshape(-1, *trainer.rollout.observations.shape[2:]).copy())
        trainer.collect()  # the update's own rollout
        before = trainer.snapshot()
        rollout = trainer.rollout

        def flat() -> Any:
            return torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])

        def sampled_as_in(precision: str) -> tuple[Any, Any]:
            """The rollout's log π_old and V_old as a run in `precision` stores them while it samples:
            the same frames and actions, the policy computed in that arithmetic. A bf16 run's ratio
            starts at exactly 1 (its sampling and its minibatches compute the same bits); fp32's stored
            log-probabilities would make bf16's ratio start off by its rounding (~3e-3, above a late
            schedule's clip range)."""
            frames = torch.from_numpy(rollout.observations.reshape(-1, *rollout.observations.shape[2:]))
            actions = torch.from_numpy(rollout.actions.reshape(-1)).long()
            trainer.model.precision = arithmetic_at(precision, at_update, config.n_updates)
            with torch.inference_mode():
                outputs = [trainer.model(chunk) for chunk in frames.split(256)]
            trainer.model.precision = "fp32"
            logits, values = torch.cat([o[0] for o in outputs]), torch.cat([o[1] for o in outputs])
            shape = rollout.log_probs.shape
            return log_probs_of(logits, actions).numpy().reshape(shape), values.numpy().reshape(shape)

        def set_layout(channels_last: bool) -> None:  # the parameters keep their identity (Adam's keys)
            trainer.model.channels_last = channels_last
            trainer.model.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)  # type: ignore[call-overload]  # torch's stubs omit it

        def update(precision: str, order: int) -> tuple[Any, Any]:
            trainer.restore(before)
            if order:
                trainer.shuffle_rng.bit_generator.state = np.random.default_rng((ORDER_SEED, order)).bit_generator.state
            rollout.log_probs[:], rollout.values[:] = sampled[precision.removesuffix(OTHER_LAYOUT)]
            layout = trainer.model.channels_last
            if precision.endswith(OTHER_LAYOUT):  # the same arithmetic, other kernels: other summation orders
                set_layout(not layout)
            # A precision that changes along the schedule computes this update as the run would.
            trainer.model.precision = arithmetic_at(precision.removesuffix(OTHER_LAYOUT), at_update, config.n_updates)
            trainer.optimize(settings)
            trainer.model.precision = "fp32"  # the policy read in fp32: the parameters alone
            set_layout(layout)
            with torch.inference_mode():
                logits = torch.cat([trainer.model(chunk)[0] for chunk in held_out.split(256)])
            return flat(), logits

        sampled = {p: sampled_as_in(p) for p in ("fp32", *precisions)}
        trainer.restore(before)
        start = flat()
        floor = [f"{p}{OTHER_LAYOUT}" for p in ("fp32", "bf16")] if {"bf16", "bf16-emulated"} <= set(precisions) else []
        results = {p: [update(p, k) for k in range(orders + 1)] for p in ["fp32", *precisions, *floor]}
    meta = {"checkpoint": str(path), "update": at_update, "env_steps": at_steps, "held_out_frames": len(held_out),
            "layout": "channels_last" if config.channels_last else "contiguous"}
    return summarize(torch, meta, results, start, precisions, orders, floor)


def summarize(torch: Any, meta: dict[str, Any], results: dict[str, list[tuple[Any, Any]]], start: Any, precisions: list[str],
              orders: int, floor: list[str]) -> dict[str, Any]:
    """The screen's numbers (the module's docstring) from each update's (parameters, held-out logits)."""
    fp32 = results["fp32"]

    def from_fp32(theta_logits: tuple[Any, Any], k: int) -> dict[str, float]:
        return distances(torch, theta_logits[0], fp32[k][0], start, theta_logits[1], fp32[k][1])

    noise = [from_fp32(fp32[k], 0) for k in range(1, orders + 1)]
    row: dict[str, Any] = {
        **meta, "update_rel_size": float((fp32[0][0] - start).norm() / start.norm()),
        "noise": {m: {"min": min(n[m] for n in noise), "median": statistics.median(n[m] for n in noise),
                      "max": max(n[m] for n in noise)} for m in ("rel", "kl")},
        "precisions": {}}
    for p in precisions:
        deviations = [from_fp32(results[p][k], k) for k in range(orders + 1)]
        mean = {m: statistics.fmean(d[m] for d in deviations) for m in ("rel", "kl")}
        row["precisions"][p] = {
            "deviation": mean, "deviation_own_order": deviations[0],
            "passes": all(mean[m] < row["noise"][m]["min"] for m in ("rel", "kl")),
            "bias": bias([r[0] - start for r in results[p]], [r[0] - start for r in fp32])}
    if {"bf16", "bf16-emulated"} <= set(precisions):
        real, emulated = results["bf16"], results["bf16-emulated"]
        apart = [distances(torch, emulated[k][0], real[k][0], start, emulated[k][1], real[k][1]) for k in range(orders + 1)]
        gap = [from_fp32(real[k], k) for k in range(orders + 1)]
        row["emulation"] = {m: {"from_bf16": statistics.fmean(a[m] for a in apart),
                                "bf16_from_fp32": statistics.fmean(g[m] for g in gap),
                                "closer_by": min(g[m] / max(a[m], 1e-30) for a, g in zip(apart, gap, strict=True))}
                            for m in ("rel", "kl")}
    for p in floor:  # each against itself in the run's layout
        own = results[p.removesuffix(OTHER_LAYOUT)]
        summed = [distances(torch, results[p][k][0], own[k][0], start, results[p][k][1], own[k][1]) for k in range(orders + 1)]
        row.setdefault("summation_order", {})[p.removesuffix(OTHER_LAYOUT)] = {
            m: statistics.fmean(d[m] for d in summed) for m in ("rel", "kl")}
    return row


def print_row(row: dict[str, Any]) -> None:
    noise = row["noise"]
    print(f"{row['checkpoint']}: update {row['update']:,} ({row['env_steps']:,} agent steps); one update moves θ by "
          f"{row['update_rel_size']:.2e} of ‖θ‖; fp32 with other minibatch orders: rel {noise['rel']['min']:.3g}–"
          f"{noise['rel']['max']:.3g} (median {noise['rel']['median']:.3g}), kl {noise['kl']['min']:.3g}–"
          f"{noise['kl']['max']:.3g} (median {noise['kl']['median']:.3g})")
    for p, r in row["precisions"].items():
        d, b = r["deviation"], r["bias"]
        print(f"  {p:<14} from fp32, same order: rel {d['rel']:.3g}, kl {d['kl']:.3g} → "
              f"{'below' if r['passes'] else 'NOT below'} the order noise; bias along the fp32 step: "
              f"{b['shrink']:+.2%} (t {b['t']:+.2f} over {b['orders']} orders)")
    if "emulation" in row:
        e = row["emulation"]
        print(f"  bf16-emulated from bf16: rel {e['rel']['from_bf16']:.3g} (bf16 from fp32 {e['rel']['bf16_from_fp32']:.3g}, "
              f"at least {e['rel']['closer_by']:.2g}× closer in every order), kl {e['kl']['from_bf16']:.3g} "
              f"(bf16 from fp32 {e['kl']['bf16_from_fp32']:.3g}, at least {e['kl']['closer_by']:.2g}× closer)")
    for p, f in row.get("summation_order", {}).items():
        print(f"  {p} in the other memory layout from {p} in {row['layout']} (the same arithmetic, other kernels): "
              f"rel {f['rel']:.3g}, kl {f['kl']:.3g}")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser = OneLineParser(prog=prog, description=docstring_help(__doc__)[0])
    parser.add_argument("--checkpoints", metavar="PATH", nargs="+", required=True,
                        help="checkpoint files along a run (each is screened on its own)")
    parser.add_argument("--precisions", metavar="P", nargs="+", default=["bf16"],
                        help="arithmetics compared with fp32: bf16, bf16-emulated, bf16-then-fp32 (default: bf16)")
    parser.add_argument("--orders", metavar="K", default="8", help="other minibatch orders, 2 to 256 (default: 8)")
    parser.add_argument("--device", metavar="DEVICE", default="cpu", help="cpu (the default), auto, cuda or cuda:N")
    args = parser.parse_args(argv)
    precisions = list(dict.fromkeys(parse_precision(p) for p in args.precisions))
    orders = parse_orders(args.orders)
    check_device_name(args.device)
    paths = [parse_checkpoint(text) for text in args.checkpoints]
    from ppo.devices import resolve_precision

    try:  # bf16 where this machine has none: refused before any rollout
        for p in precisions:
            resolve_precision(p, parse_device(args.device))
    except ConfigError as e:
        bad_value("--precisions", p, str(e).split("expected ", 1)[-1])
    rows = []
    for path in paths:
        rows.append(screen_checkpoint(path, precisions, orders, args.device))
        print_row(rows[-1])
    print(json.dumps({"orders": orders, "precisions": precisions, "rows": rows}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
