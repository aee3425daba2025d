"""Engine side of the Inductor seed: run `autokernel.engine.inductor_seed` in a subprocess, read its verdict.

The engine process never imports candidates, and Inductor's code generation can fail or crash in ways
no `except` catches (a C++ abort, a hung compile); a subprocess keeps all of that out of the session,
which only learns "here is the seed file" or one line saying why there is none.

A seed made once is kept in `$AUTOKERNEL_CACHE_DIR/seeds/` under a key of what makes it: the problem's text (with
the files it reads beside it), the size, the versions of Python, torch and Triton, and the engine's own code. The
same problem seeded again (a resumed or repeated batch, a seed made ahead by `engine/seed_prefetch.py`) is a
copy, not ~25 s of Inductor; a lock per key makes a second asker wait for the first instead of repeating it.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

from .roofline import cache_dir

SEED_TIMEOUT_S = 300.0
CHANNELS_LAST = "channels_last"  # a seed's variant with its convolutions in the layout Inductor picks for a GPU
NO_SEED = "no operation of a kernel type autokernel knows, and Inductor could not seed it"  # the skip's reason


_SIDECAR = re.compile(r"Path\(__file__\)\.with_name\((['\"])([^'\"]+)\1\)")


class MissingSidecar(ValueError):
    """A problem reads a file beside itself that is not there."""


def embedded(source: str, folder: Path) -> str:
    """`source` with each file it reads from beside itself (`Path(__file__).with_name("x.pt")`, an extracted
    problem's saved tensors) replaced by those bytes, inline: the seed must run from anywhere (issue 25), and
    the seed cache's key must change when those bytes do."""
    def inline(m: re.Match) -> str:
        sidecar = folder / m.group(2)
        if not sidecar.is_file():
            raise MissingSidecar(f"the problem reads {m.group(2)} beside it, which does not exist")
        data = base64.b64encode(sidecar.read_bytes()).decode()
        return f"__import__('io').BytesIO(__import__('base64').b64decode({data!r}))"

    return _SIDECAR.sub(inline, source)


def _one_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:limit]


def seed_problem(problem: str | Path, out: Path, size: str | None = None, timeout_s: float = SEED_TIMEOUT_S,
                 on_cached: Callable[[], None] | None = None,
                 on_spawn: Callable[[subprocess.Popen], None] | None = None) -> tuple[Path | None, str]:
    """(the seed file, "") when Inductor's code for `problem` became a candidate at `out` (its variants beside
    it); else (None, why). From the seed cache where it holds this problem (`on_cached()` is then told);
    `on_spawn(proc)` is told of the subprocess when one is started (so a caller can end it early)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    key = _cache_key(Path(problem), size)
    if key is None:  # the problem cannot be read: the subprocess says why
        return _generate(problem, out, size, timeout_s, on_spawn)
    with _held(key) as entry:
        if entry is not None and _cached_copy(entry / "seed.py", out):
            if on_cached:
                on_cached()
            return out, ""
        path, why = _generate(problem, out, size, timeout_s, on_spawn)
        if path is not None and entry is not None:
            _keep(out, entry)
        return path, why


def _generate(problem: str | Path, out: Path, size: str | None, timeout_s: float,
              on_spawn: Callable[[subprocess.Popen], None] | None) -> tuple[Path | None, str]:
    """Inductor's seed of `problem` made by the seed subprocess, written at `out`."""
    cmd = [sys.executable, "-m", "autokernel.engine.inductor_seed", str(problem), "-o", str(out)]
    if size:
        cmd += ["--size", size]
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # code generation only: nothing runs a kernel here
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                stdin=subprocess.DEVNULL)
    except OSError as e:
        return None, f"could not start the seed subprocess: {e}"
    if on_spawn:
        on_spawn(proc)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, f"Inductor's code generation took longer than {timeout_s:.0f} s"
    verdicts = [line for line in stdout.splitlines() if line.startswith("{")]
    try:
        verdict = json.loads(verdicts[-1]) if verdicts else None
    except json.JSONDecodeError:
        verdict = None
    if verdict is None:
        return None, f"the seed subprocess exited {proc.returncode}: {_one_line(stderr)}"
    if not verdict.get("ok"):
        return None, _one_line(str(verdict.get("error") or "no reason given"))
    if not out.exists():
        return None, f"the seed subprocess reported {out.name} but did not write it"
    return out, ""


# -- the seed cache ------------------------------------------------------------------------------------
def _cache_root() -> Path:
    return cache_dir() / "seeds"


def _makers() -> str:
    """What besides the problem decides its seed: Python, torch and Triton, and every module of the engine."""
    parts = [sys.version.split()[0]]
    for dist in ("torch", "triton"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} -")
    engine = hashlib.sha256()
    for module in sorted(Path(__file__).parent.glob("*.py")):
        engine.update(module.read_bytes())
    return " | ".join(parts + [engine.hexdigest()])


def _cache_key(problem: Path, size: str | None) -> str | None:
    """The seed's key (None when the problem or a file it reads beside it cannot be read)."""
    try:
        text = embedded(problem.read_text(errors="replace"), problem.parent)
    except (OSError, MissingSidecar):
        return None
    return hashlib.sha256("\0".join([text, size or "", _makers()]).encode()).hexdigest()[:40]


@contextmanager
def _held(key: str) -> Iterator[Path | None]:
    """The key's cache folder, with the key's lock held (whoever makes a seed holds it until it is kept); None
    where the cache cannot be written (the seed is then made as if there were none)."""
    root = _cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / f"{key}.lock", "a")
    except OSError:
        yield None
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root / key
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cached_copy(seed: Path, out: Path) -> bool:
    """The cached seed copied to `out`; False when there is none or the copy fails (it is then made afresh)."""
    try:
        return _copy_seed(seed, out)
    except OSError:
        return False


def _copy_seed(seed: Path, out: Path) -> bool:
    """The seed at `seed` and its variants copied to `out` and beside it (replacing variants of an older seed
    there); False when there is none."""
    if not seed.is_file():
        return False
    for old in seed_variants(out).values():
        Path(old).unlink(missing_ok=True)
    if seed.resolve() != out.resolve():
        shutil.copyfile(seed, out)
    for name, path in seed_variants(seed).items():
        shutil.copyfile(path, variant_path(out, name))
    return True


def _keep(out: Path, entry: Path) -> None:
    """The seed just made at `out` into the cache folder `entry`, whole or not at all (a full disk loses only
    the cache)."""
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
        _copy_seed(out, tmp / "seed.py")
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    except OSError:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def variant_path(seed: Path, name: str) -> Path:
    """Where the seed generator writes a seed's variant: `<seed stem>.<name>.py` beside it."""
    return seed.with_name(f"{seed.stem}.{name}.py")


def seed_variants(seed: str | Path) -> dict[str, str]:
    """The variants written beside a seed file, {name: path} ({} when there are none)."""
    seed = Path(seed)
    return {p.name[len(seed.stem) + 1:-3]: str(p) for p in sorted(seed.parent.glob(f"{seed.stem}.*.py"))}
