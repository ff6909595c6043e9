"""The training options reference, rendered from `PPOConfig` through the very parser `--help` prints.

An MkDocs hook (mkdocs.yml's `hooks:`): a page holding the marker line below gets, in its place, one
table per section of options, built from `configs.cli.build_parser` and `PPOConfig`'s field
metadata. A hand-written table would drift from `--help` the first time a default or a help text
changed; this one cannot, and `tests/test_docs.py` checks that every option `--help` prints is in it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

MARKER = "<!-- options-reference -->"


def _cell(text: str) -> str:
    # One table cell: a literal | would split it, a line break would end the row.
    return " ".join(text.split()).replace("|", "\\|")


def _default(field: dataclasses.Field[Any]) -> str:
    from configs.cli import shown_default

    return "none" if field.default is None else f"`{shown_default(field.default)}`"


def _notes(field: dataclasses.Field[Any]) -> str:
    notes = []
    live = field.metadata.get("live")
    if live is not None:
        notes.append(f"**live**, {live[0]:g} to {live[1]:g}")
    shown = getattr(field.metadata.get("check"), "shown", None)  # configs.fields.Within: the range validate keeps
    if shown is not None:
        notes.append(f"from {shown}" if not shown.startswith(">") else shown)
    if field.metadata.get("run_option"):
        notes.append("run option: may change on `--resume`")
    return "; ".join(notes)


def options_markdown() -> str:
    """Every `PPOConfig` option, section by section, in the order `--help` shows them."""
    from configs.cli import build_parser
    from configs.ppo import PPOConfig

    fields = {f.name: f for f in dataclasses.fields(PPOConfig)}
    parser = build_parser("python -m experiments.breakout", "")
    parts = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.dest in fields]
        if not actions:
            continue
        title = group.title or ""
        parts.append(f"### {title[:1].upper()}{title[1:]}\n")
        parts.append("| option | value | default | what it does | notes |")
        parts.append("|---|---|---|---|---|")
        for action in actions:
            field = fields[action.dest]
            option = action.option_strings[0]
            parts.append(f"| `{option}` | `{_cell(str(action.metavar))}` | {_default(field)} | "
                         f"{_cell(field.metadata['help'])} | {_notes(field)} |")
        parts.append("")
    return "\n".join(parts)


def render(markdown: str) -> str:
    return markdown.replace(MARKER, options_markdown()) if MARKER in markdown else markdown


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs' hook: called with each page's Markdown before it is converted."""
    return render(markdown)
