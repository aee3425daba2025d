"""Issue 18's measurement without a search: the four forwards of a model with kernel-type starters kept.

Runs the integration itself (`engine/integrate.py`: a subprocess, outputs checked, interleaved rounds)
on the bundled example with each named kind's starter as the kept kernel, and prints eager,
torch.compile, patched and patched + torch.compile, the recommendation, and the detail line; and the
kernel-subset search behind the two patched forwards (engine/kernel_selection.py): its progress lines as
it goes, then every subset measured and the one chosen. `-o FILE` also writes the IntegrationResult and
the search as JSON.

    python scripts/four_forwards.py --device cuda --size large            (the bundled Llama on a GPU)
    python scripts/four_forwards.py --model my_model.py --device cuda     (the types its profile finds)
    python scripts/four_forwards.py --model vit --kinds layernorm,softmax --device cuda --size large
    python scripts/four_forwards.py --kinds rmsnorm,fused_mlp --backend cuda -o out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path


def profiled_kinds(model: str, device: str, size: str, backend: str) -> list[str]:
    """The kernel types the profiler finds in the model that have a `backend` starter, in Amdahl order."""
    from autokernel.engine.model_loading import load_model
    from autokernel.engine.profiling import profile_model
    from autokernel.kernels import available, get_spec

    known = set(available())
    rows = profile_model(load_model(model, device, size=size), iters=2, with_stack=True).rows
    kinds = dict.fromkeys(r.kind for r in rows if r.kind in known and backend in get_spec(r.kind).starters)
    return list(kinds)


def _follow(path: Path, done: threading.Event) -> None:
    """Print the integration's progress lines as they are written (its compiles take minutes on a GPU)."""
    seen = 0
    while True:
        finished = done.wait(1.0)
        if path.exists():
            lines = path.read_text().splitlines()
            for line in lines[seen:]:
                print(f"  ... {line}", flush=True)
            seen = len(lines)
        if finished:
            return


def _print_search(label: str, search: dict, chosen: list[str]) -> None:
    """Every subset the search timed for one patched forward, step by step, and the one it chose."""
    print(f"{label}: kernel subsets ({search['steps']} steps, {search['seconds']:.0f} s on candidates; "
          f"stopped: {search['stopped']})")
    for t in search["trials"]:
        what = f"without {t['left_out']}" if t["left_out"] else "current"
        ms = f"{t['ms']:.4g} ms" if t["ms"] is not None else (t["note"] or "failed")[:80]
        gain = f"  {t['gain']:+.1%} (worst round {t['worst']:+.1%})" if t["gain"] is not None else ""
        print(f"  step {t['step']}  {what:<28} [{', '.join(t['kinds'])}]  {ms}{gain}")
    print(f"  chosen: {', '.join(chosen) or 'none'}")


def main(argv: list[str] | None = None) -> int:
    from autokernel.engine.examples import example_path
    from autokernel.engine.integrate import FORWARDS, integrate_session_kernels
    from autokernel.kernels import get_spec

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama", help="a bundled example's name, or a model file")
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="large")
    p.add_argument("--kinds", help="comma-separated kernel types (default: those the model's profile finds)")
    p.add_argument("--backend", default="triton")
    p.add_argument("-o", "--out", help="write the result as JSON here")
    args = p.parse_args(argv)
    model = args.model if args.model.endswith(".py") else str(example_path(args.model))
    kinds = args.kinds.split(",") if args.kinds else profiled_kinds(model, args.device, args.size, args.backend)
    if not kinds:
        print("the model's profile finds no kernel type with a starter: nothing to swap in", file=sys.stderr)
        return 1
    print(f"kept kernels: the {args.backend} starters of {', '.join(kinds)}", flush=True)
    kernels = []
    for kind in kinds:
        starter = Path(get_spec(kind).starters[args.backend])
        kernels.append({"kind": kind, "candidate_id": f"{kind}-starter-{args.backend}", "source": starter.read_text()})
    with tempfile.TemporaryDirectory() as work:
        done = threading.Event()
        follower = threading.Thread(target=_follow, args=(Path(work) / "progress.log", done), daemon=True)
        follower.start()
        try:
            result = integrate_session_kernels(model, args.device, kernels, Path(work), size=args.size,
                                               timeout_s=1800)
        finally:
            done.set()
            follower.join()
        selection_path = Path(work) / "selection.json"
        selection = json.loads(selection_path.read_text()) if selection_path.exists() else None
    ms = {"eager": result.eager_ms, "compile": result.compile_ms, "patched": result.model_ms,
          "patched_compile": result.patched_compile_ms}
    for name, label in FORWARDS.items():
        print(f"{label:>24}: " + (f"{ms[name]:.4g} ms" if ms[name] else "not run"))
    if result.compile_ms and result.patched_compile_ms:
        print(f"patched + torch.compile vs torch.compile: {result.compile_ms / result.patched_compile_ms:.3f}x")
    print(f"outputs match: {result.correct}; fastest: {FORWARDS.get(result.recommended, result.recommended)}")
    if selection:
        for mode, search in selection["modes"].items():
            _print_search(FORWARDS[mode], search, selection["chosen"][mode])
    print(result.detail)
    if args.out:
        Path(args.out).write_text(json.dumps(dict(result.payload(), selection=selection), indent=2, default=str))
    return 0 if result.correct else 1


if __name__ == "__main__":
    sys.exit(main())
