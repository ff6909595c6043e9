"""The training options reference, rendered from `PPOConfig` through the very parser `--help` prints.

An MkDocs hook (mkdocs.yml's `hooks:`): a page holding the marker line below gets, in its place, one
definition list per section of options, built from `configs.cli.build_parser` and `PPOConfig`'s
field metadata. A hand-written list would drift from `--help` the first time a default or a help
text changed; this one cannot, and `tests/test_docs.py` checks that every option `--help` prints is
in it. A definition per option, not a table: a table of five columns is cut off or scrolls sideways
at a laptop's width and is unreadable on a phone, while a definition wraps to any width.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

MARKER = "<!-- options-reference -->"


def _oneline(text: str) -> str:
    # A line break inside a definition would end it.
    return " ".join(text.split())


def _accepted(field: dataclasses.Field[Any], metavar: str, annotation: Any) -> str:
    """What the option takes, in words: `true` or `false`; an integer from 1 to 64; a number."""
    optional = type(None) in typing.get_args(annotation)
    if metavar.startswith("{"):
        names = [f"`{name}`" for name in metavar.strip("{}").split(",")]
        text = ", ".join(names[:-1]) + f" or {names[-1]}"
    else:
        base = next((a for a in typing.get_args(annotation) if a is not type(None)), annotation)
        text = {int: "an integer", float: "a number"}.get(base, "")
        check = field.metadata.get("check")
        shown = getattr(check, "shown", None)  # configs.fields.Within: the range validate keeps
        if text and shown is not None:
            text += f" {shown}" if shown.startswith(">") else f" from {shown}"
        elif text and check is not None:
            # A sign rule (configs.fields.positive, unit_interval, …) names what it accepts when it
            # refuses: -1 is refused by every one of them, and its words are the refusal's own.
            rule = (check(-1) or "").removesuffix(", or none")
            text = rule.replace("a number", text, 1) if rule.startswith("a number") else text
    if not text:  # a name, a folder, an address: the help text says which
        return ""
    return text + (", or `none`" if optional else "")


def _facts(field: dataclasses.Field[Any], metavar: str, annotation: Any, none_means: str) -> str:
    from configs.cli import shown_default

    facts = [f"default: {none_means}" if field.default is None else f"default: `{shown_default(field.default)}`"]
    accepted = _accepted(field, metavar, annotation)
    if accepted:
        facts.append(f"accepts {accepted}")
    live = field.metadata.get("live")
    if live is not None:
        facts.append(f"**live**, {live[0]:g} to {live[1]:g}")
    if field.metadata.get("run_option"):
        facts.append("run option: may change on `--resume`")
    return " · ".join(facts)


def options_markdown() -> str:
    """Every `PPOConfig` option, section by section, in the order `--help` shows them."""
    from configs.cli import build_parser
    from configs.ppo import PPOConfig

    fields = {f.name: f for f in dataclasses.fields(PPOConfig)}
    hints = typing.get_type_hints(PPOConfig)
    parser = build_parser("python -m experiments.breakout", "")
    parts = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.dest in fields]
        if not actions:
            continue
        title = group.title or ""
        parts.append(f"### {title[:1].upper()}{title[1:]}\n")
        for action in actions:
            field, metavar = fields[action.dest], str(action.metavar)
            # The term is the option as typed; the first paragraph says what it does, the second
            # its default, what it accepts, whether it is live and in what range.
            # A none default is explained by the help's last words ("(default: none, never)").
            text, _, note = field.metadata["help"].partition(" (default: ")
            parts.append(f"`{action.option_strings[0]} {metavar}`")
            parts.append(f":   {_oneline(text)}\n")
            parts.append(f"    {_facts(field, metavar, hints[action.dest], note.rstrip(')') or 'none')}\n")
    return "\n".join(parts)


def render(markdown: str) -> str:
    return markdown.replace(MARKER, options_markdown()) if MARKER in markdown else markdown


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs' hook: called with each page's Markdown before it is converted."""
    return render(markdown)
