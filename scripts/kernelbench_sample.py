"""A fixed random sample of KernelBench problems, drawn the same way every time (issue 17's GPU measurement).

    python3 scripts/kernelbench_sample.py --kernelbench KB_REPO --n 40 --seed 17 -o .kb/sample

KB_REPO is a KernelBench checkout, or its bare git mirror (then the files are read at --rev with `git show`).
The sample is drawn from level 1 and level 2 together (`random.Random(seed).sample` over the sorted file
names, so the draw does not depend on the order the filesystem lists them), copied under OUT/level1 and
OUT/level2, and OUT/SAMPLE.md says how it was drawn: the KernelBench commit, the seed, n and the names.
Never commit the copied problems (KernelBench's files); the manifest may be quoted in docs/results.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from pathlib import Path

LEVELS = ("level1", "level2")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def listing(repo: Path, rev: str) -> tuple[list[str], str, callable]:
    """Every level-1 and level-2 problem path (sorted), the commit they come from, and a reader of one."""
    tree = repo / "KernelBench"
    if tree.is_dir():
        names = sorted(str(p.relative_to(tree)) for level in LEVELS for p in (tree / level).glob("*.py"))
        try:
            commit = _git(repo, "rev-parse", "HEAD").strip()
        except (subprocess.CalledProcessError, FileNotFoundError):
            commit = "unknown (not a git checkout)"
        return names, commit, lambda name: (tree / name).read_text()
    commit = _git(repo, "rev-parse", rev).strip()
    names = sorted(line[len("KernelBench/"):] for level in LEVELS
                   for line in _git(repo, "ls-tree", "--name-only", commit, f"KernelBench/{level}/").split()
                   if line.endswith(".py"))
    return names, commit, lambda name: _git(repo, "show", f"{commit}:KernelBench/{name}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernelbench", required=True, help="a KernelBench checkout or its bare git mirror")
    p.add_argument("--rev", default="HEAD", help="the commit to read from a bare mirror")
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("-o", "--out", required=True)
    args = p.parse_args()
    repo, out = Path(args.kernelbench), Path(args.out)
    try:
        names, commit, read = listing(repo, args.rev)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print(f"kernelbench_sample: {repo} is neither a KernelBench checkout nor its git mirror ({e})", file=sys.stderr)
        return 2
    if len(names) < args.n:
        print(f"kernelbench_sample: only {len(names)} level-1 and level-2 problems under {repo}", file=sys.stderr)
        return 2
    chosen = sorted(random.Random(args.seed).sample(names, args.n))
    for name in chosen:
        dest = out / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(read(name))
    lines = [f"# A KernelBench sample: {args.n} of {len(names)} level-1 and level-2 problems", "",
             f"`python3 scripts/kernelbench_sample.py --kernelbench KB --n {args.n} --seed {args.seed} -o OUT`, "
             f"KernelBench commit {commit}: `random.Random({args.seed}).sample` over the sorted names.", ""]
    lines += [f"- {name}" for name in chosen]
    (out / "SAMPLE.md").write_text("\n".join(lines) + "\n")
    print(f"{len(chosen)} problems under {out} ({sum(n.startswith('level1') for n in chosen)} of level 1); "
          f"the draw is in {out / 'SAMPLE.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
