"""The README's commands table says what the CLI does: its options exist, its required ones show."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main

from cli import app

README = Path(__file__).resolve().parents[2] / "README.md"


def _rows() -> list[str]:
    text = README.read_text()
    table = text[text.index("## Commands") : text.index("## API v1")]
    return re.findall(r"^\| `(tps [^|]*?)` \|", table.replace("\\|", "¦"), flags=re.MULTILINE)


def _commands(row: str) -> list[tuple[list[str], str]]:
    """Return each (command path, its usage text) a row names; `a¦b` words are alternatives."""
    found = []
    for usage in row.split("`, `"):
        words = usage.split()[1:]
        path: list[list[str]] = []
        for word in words:
            if word.startswith(("-", "[", "(")) or word.isupper() or "." in word:
                break
            path.append(word.split("¦"))
        heads, last = path[:-1], path[-1]
        found += [([*(h[0] for h in heads), choice], usage) for choice in last]
    return found


def _without_brackets(text: str) -> str:
    while re.search(r"\[[^\[\]]*\]", text):
        text = re.sub(r"\[[^\[\]]*\]", "", text)
    return text


def test_every_command_row_matches_the_cli() -> None:
    root = typer.main.get_command(app)
    rows = _rows()
    assert len(rows) >= 12
    seen = set()
    for row in rows:
        for path, usage in _commands(row):
            command: Any = root
            for name in path:
                assert hasattr(command, "commands"), path  # a group
                command = command.commands[name]
            seen.add(" ".join(path))
            options = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
            for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", usage):
                for part in flag.split("/"):
                    assert part in options, f"README: `{usage}` names {part}, unknown to the CLI"
            required = [p for p in command.params if p.required and p.opts[0].startswith("--")]
            for param in required:
                assert param.opts[0] in _without_brackets(usage), (
                    f"README: `{usage}` shows {param.opts[0]} as optional; the CLI requires it"
                )
    for name in ("demo", "serve", "train", "evaluate", "agent export", "agent run", "token create"):
        assert name in seen, name
