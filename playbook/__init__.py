"""autokernel.playbook: the six optimization tiers as Markdown, and the templates the offline agent moves.

`tiers()` loads the pages (the LLM agent puts them in its prompt, the UI shows them); the
structured moves live in `autokernel.playbook.templates`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Tier:
    number: int
    name: str  # the page's title without "Tier N —"
    path: Path
    text: str  # the whole page, Markdown


def tiers() -> list[Tier]:
    """The six tiers in order, read from `playbook/tier<N>_*.md`."""
    out = []
    for path in sorted(HERE.glob("tier[1-9]_*.md")):
        number = int(path.name[4])
        text = path.read_text(encoding="utf-8")
        title = text.splitlines()[0].lstrip("# ").strip() if text else path.stem
        name = re.sub(r"^Tier\s+\d+\s*[—–-]\s*", "", title)
        out.append(Tier(number=number, name=name, path=path, text=text))
    return out


def tier(number: int) -> Tier:
    """One tier by number; ValueError for a number outside 1..6."""
    for t in tiers():
        if t.number == number:
            return t
    raise ValueError(f"no playbook tier {number}; tiers are 1 to {len(tiers())}")
