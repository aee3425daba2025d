"""Packaging: one import name, every sub-package listed, no generic top-level names."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"engine": "autokernel.engine", "tui": "autokernel.tui", "kernels": "autokernel.kernels", "playbook": "autokernel.playbook"}


def test_every_subpackage_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    on_disk = set()
    for folder, name in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts:
                continue
            on_disk.add(".".join([name, *rel.parts]))
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert cfg["package-dir"] == {v: k for k, v in MAPPED.items()}


def test_the_shared_cuda_headers_ship_with_the_package():
    """kernels/include/ is not a package, so its headers reach an installed copy only through package-data;
    without them every CUDA build on Hopper fails to find ak_hopper.cuh."""
    from fnmatch import fnmatch

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    headers = sorted((ROOT / "kernels" / "include").glob("*.cuh"))
    assert headers, "kernels/include/ holds the headers the CUDA sources include"
    for header in headers:
        rel = header.relative_to(ROOT / "kernels").as_posix()
        assert any(fnmatch(rel, pattern) for pattern in data.get("autokernel.kernels", [])), rel


def test_console_scripts_exist():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"autokernel", "autokernel-tui"}


def test_cli_help_runs_without_a_gpu():
    out = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "profile" in out.stdout
