"""Write constraints.txt from the versions installed now: the closure of the project's own dependencies
(every extra included: dev, ray), less torch, triton and torch's own requirements, which each machine keeps.

Run it after `./install.sh` with newer versions and a green `python3 -m pytest`:
    python3 scripts/refresh_constraints.py > constraints.txt.new && mv constraints.txt.new constraints.txt
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

LEFT_TO_THE_MACHINE = {"torch", "triton", "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "fsspec",
                       "filelock", "typing-extensions", "setuptools", "pip"}
HEADER = Path(__file__).resolve().parents[1] / "constraints.txt"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> dict[str, str]:
    """Installed name -> version for `roots` and everything they require (extras not followed)."""
    seen: dict[str, str] = {}
    stack = list(roots)
    while stack:
        name = _norm(stack.pop())
        if name in seen or name in LEFT_TO_THE_MACHINE:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(req.name)
    return seen


def main() -> int:
    project = tomllib.loads((HEADER.parent / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    roots = [Requirement(r).name for r in project["dependencies"] + extras]
    header = [line for line in HEADER.read_text().splitlines() if line.startswith("#")] if HEADER.exists() else []
    for line in header + [f"{n}=={v}" for n, v in sorted(closure(roots).items())]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
