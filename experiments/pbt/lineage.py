"""The population's lineage: one row per exploit/explore (who copied whom, at which update, with
which values), as lineage.csv, and drawn beside the members' scores as lineage.png. Both are
written without following a link: lineage.csv appended through `open_own_file`, lineage.png
replaced whole by rename."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from configs.files import atomic_write
from experiments.run.folders import RunFolder, publish
from experiments.run.safe_files import open_own_file, open_to_read
from experiments.run.updates_csv import read_updates

COLUMNS = ("update", "member", "copied_from", "changes", "node_id", "donor_node_id")  # the Ray nodes their last segments ran on


def append_rows(path: Path, rows: list[dict[str, object]]) -> None:
    """Append `rows`, made durable before the population counts their generation as done."""
    new = not os.path.lexists(path)
    with os.fdopen(open_own_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(rows)
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> list[dict[str, str]]:
    if not os.path.lexists(path):
        return []
    with io.TextIOWrapper(open_to_read(path), newline="") as f:
        return list(csv.DictReader(f))


def plot(path: Path, lineage: list[dict[str, str]], run_dirs: list[Path]) -> None:
    """Each member's score_mean_100 and learning rate against its updates (from updates.csv), an
    arrow from donor to member at each exploit, and its row (member←donor: values) along its line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    curves: dict[int, dict[int, float]] = {}
    for member, run_dir in enumerate(run_dirs):
        updates_csv = RunFolder.at(run_dir).updates_csv
        rows = read_updates(updates_csv) if updates_csv.exists() else []
        colour = f"C{member % 10}"
        xs = [int(r["update"] or 0) for r in rows]
        scores = [r["score_mean_100"] for r in rows]
        curves[member] = {x: s for x, s in zip(xs, scores, strict=True) if s is not None}
        top.plot(xs, [float("nan") if s is None else s for s in scores], color=colour, label=f"member {member}")
        bottom.plot(xs, [r["learning_rate"] for r in rows], color=colour)
    for row in lineage:
        update, member, donor = int(row["update"]), int(row["member"]), row["copied_from"]
        if not donor:
            continue
        start, end = curves.get(int(donor), {}).get(update), curves.get(member, {}).get(update)
        for axes in (top, bottom):
            axes.axvline(update, color="0.85", linewidth=0.8, zorder=0)
        # Who took whose learner, with which values, along the exploit's line.
        bottom.annotate(f"{member}←{donor}: {row['changes']}", (update, 1.0), xycoords=("data", "axes fraction"),
                        rotation=90, va="top", ha="right", fontsize="x-small", color=f"C{member % 10}")
        if start is not None and end is not None:
            top.annotate("", (update, end), (update, start), arrowprops={"arrowstyle": "->", "color": f"C{member % 10}"})
    top.set_ylabel("score_mean_100")
    top.set_title(f"population of {len(run_dirs)}: exploits at the grey lines (arrow: donor → member)")
    top.legend(loc="upper left", fontsize="small")
    bottom.set_ylabel("learning rate used")
    bottom.set_xlabel("update")
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    plt.close(fig)
    atomic_write(path, image.getvalue())
    publish(path)
