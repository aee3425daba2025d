"""The worker pool on a box with several GPUs (issue 22): a benchmark, not a test.

    python3 scripts/multigpu_bench.py consistency -o DIR           # the same kernels timed on each GPU
    python3 scripts/multigpu_bench.py sessions -o DIR [--experiments 12] [--kb PROBLEM_DIR ...]
    python3 scripts/multigpu_bench.py ray -o DIR                   # the optimize session through Ray, added
    python3 scripts/multigpu_bench.py fixed -o DIR [--kernel rmsnorm] [--candidates 24]   # the pool alone
    python3 scripts/multigpu_bench.py baseline -o DIR [--experiments 12]  # the one-worker session, alone

`consistency` times a few fixed kernels (our softmax and RMSNorm starters, a bf16 GEMM, a copy) on every
visible GPU with `triton.testing.do_bench` (L2 flushed, median), and reports each GPU against the median.

`sessions` runs, with fresh databases under DIR:
  1. side by side, each owning one GPU: the bundled Llama's optimize session with --workers 1 on GPU 0, and
     the KernelBench batch with --workers 1 on GPU 1 (one problem at a time; separate GPUs: neither timing
     sees the other's work); with more than two GPUs the one-lane batch is dealt into one-lane parts on
     GPUs 1.. side by side, and their walls are added;
  2. then on all GPUs: the same batch with --workers N (N problems side by side, each on its own GPU with one
     worker: engine/kernelbench_lanes.py) and the same optimize session with --workers N (one pool of N).
`ray` runs that session once more with --ray local (the workers as Ray actors).
`baseline` runs the one-worker optimize session of `sessions` by itself on GPU 0 (a one-GPU box, or to see
whether the jobs beside phase 1 slowed it), with the same arguments, fresh database and caches; DIR/baseline.json.
`fixed` measures the pool alone, without a search whose path depends on what it measures: the same list of
playbook candidates (every single-knob move of a kernel type's starter, in order) checked in one dtype and
timed at the type's first bench shape, through a pool of one worker and then of one per GPU, each with its own caches.
Each optimize session runs a fixed number of experiments (--max-experiments, a plateau that cannot stop it,
no integration); its rate is decided experiments over the span from the first experiment written to the last
decided. Writes DIR/multigpu.json and prints the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pool_bench import busy_line, session_rate  # scripts/ is this script's own folder on sys.path
from session_anatomy import anatomy, describe, dump_events

CLI = [sys.executable, "-m", "autokernel.engine.cli"]


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def consistency(out: Path) -> dict:
    """Each kernel's median ms on each GPU, and each GPU's distance from the median of all of them."""
    import torch
    import triton.testing

    from autokernel.kernels import get_spec

    def starter(kind: str):
        spec = get_spec(kind)
        path = spec.starters["triton"]
        ns: dict = {"__file__": str(path), "__name__": f"ak_{kind}_starter"}
        exec(compile(path.read_text(), str(path), "exec"), ns)
        return ns["kernel_fn"] if "kernel_fn" in ns else ns[spec.entry]

    cases = {
        "softmax starter 8192x8192 bf16": ("softmax", (8192, 8192)),
        "rmsnorm starter 8192x8192 bf16": ("rmsnorm", (8192, 8192)),
        "matmul (cuBLAS) 8192^3 bf16": ("gemm", (8192, 8192)),
        "copy 1 GiB": ("copy", (1 << 29,)),
    }
    table: dict[str, list[float]] = {name: [] for name in cases}
    names = []
    for i in range(gpu_count()):
        names.append(f"cuda:{i} {torch.cuda.get_device_name(i)}")
        with torch.cuda.device(i):
            for name, (kind, shape) in cases.items():
                g = torch.Generator(device=f"cuda:{i}").manual_seed(0)
                if kind == "copy":
                    x = torch.empty(shape, device=f"cuda:{i}", dtype=torch.float16)
                    y = torch.empty_like(x)
                    fn = lambda x=x, y=y: y.copy_(x)  # noqa: E731
                elif kind == "gemm":
                    a = torch.randn(shape, device=f"cuda:{i}", dtype=torch.bfloat16, generator=g)
                    b = torch.randn(shape, device=f"cuda:{i}", dtype=torch.bfloat16, generator=g)
                    fn = lambda a=a, b=b: a @ b  # noqa: E731
                else:
                    x = torch.randn(shape, device=f"cuda:{i}", dtype=torch.bfloat16, generator=g)
                    k = starter(kind)
                    if kind == "rmsnorm":
                        w = torch.ones(shape[-1], device=f"cuda:{i}", dtype=torch.bfloat16)
                        fn = lambda k=k, x=x, w=w: k(x, w)  # noqa: E731
                    else:
                        fn = lambda k=k, x=x: k(x)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                table[name].append(float(triton.testing.do_bench(fn, warmup=50, rep=400, return_mode="median")))
    rows = []
    for name, ms in table.items():
        med = statistics.median(ms)
        rows.append({"kernel": name, "ms": ms, "median": med, "max_off": max(abs(m / med - 1) for m in ms)})
    result = {"gpus": names, "rows": rows}
    (out / "consistency.json").write_text(json.dumps(result, indent=1))
    print("GPUs: " + "; ".join(names))
    print(f"{'kernel':34} " + " ".join(f"{'cuda:' + str(i):>10}" for i in range(len(names))) + "  max off median")
    for r in rows:
        print(f"{r['kernel']:34} " + " ".join(f"{m:10.4f}" for m in r["ms"]) + f"  {100 * r['max_off']:.1f}%")
    return result


def _store_facts(db: Path) -> dict:
    """Each optimize session's rate and workers (pool_bench.session_rate) and, per target, the last candidate
    kept and when it was decided (s after the first experiment)."""
    from autokernel.engine import events as ev
    from autokernel.engine.store import Store

    store = Store(db)
    out = []
    for row in store.sessions(kind="optimize"):
        events = list(store.iter_events(row["id"]))
        written = [e.ts for e in events if isinstance(e, ev.CandidateWritten)]
        if not written or not any(isinstance(e, ev.Decision) for e in events):
            continue
        kept = {e.target: {"candidate": e.candidate_id, "decided_s": e.ts - min(written)}
                for e in events if isinstance(e, ev.Decision) and e.decision in ("kept", "approved")}
        out.append({"session": row["id"], **session_rate(events), "best": kept, "anatomy": anatomy(events)})
    return {"sessions": out}


def _spawn(args: list[str], folder: Path, gpus: str | None, extra_env: dict | None = None) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    # Every compile cache is the run's own: a run after another must not find its kernels already built.
    env = dict(os.environ, AUTOKERNEL_DB=str(folder / "sessions.db"), AUTOKERNEL_CACHE_DIR=str(folder / "cache"),
               TRITON_CACHE_DIR=str(folder / "triton-cache"), TORCHINDUCTOR_CACHE_DIR=str(folder / "inductor-cache"),
               **(extra_env or {}))
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    shown = " ".join(f"{k}={v}" for k, v in {**(extra_env or {}), **({"CUDA_VISIBLE_DEVICES": gpus} if gpus else {})}.items())
    print(f"  start {folder.name}: {' '.join(args)}" + (f" ({shown})" if shown else ""), flush=True)
    return subprocess.Popen(CLI + args + ["--json"], stdout=open(folder / "out.json", "w"),
                            stderr=open(folder / "log.txt", "w"), env=env)


def _ends(procs: list[subprocess.Popen]) -> list[float]:
    """When each of `procs` side by side exited (time.monotonic): waiting on them in turn would date every
    one that ended first at the exit of the one before it."""
    ends: dict[int, float] = {}
    while len(ends) < len(procs):
        for k, proc in enumerate(procs):
            if k not in ends and proc.poll() is not None:
                ends[k] = time.monotonic()
        time.sleep(0.2)
    return [ends[k] for k in range(len(procs))]


def _finish(name: str, proc: subprocess.Popen, folder: Path, started: float, ended: float | None = None) -> dict:
    rc = proc.wait()
    wall = (ended or time.monotonic()) - started
    try:
        doc = json.loads((folder / "out.json").read_text())
    except (OSError, ValueError):
        doc = None
    db = folder / "sessions.db"
    facts = _store_facts(db) if db.exists() else {"sessions": []}
    if db.exists():  # the raw output to keep: every event, the candidates' sources left out
        dump_events(db, folder / "events.jsonl.gz")
    print(f"  done {name}: rc={rc}, {wall:.0f} s", flush=True)
    return {"name": name, "rc": rc, "wall_s": wall, "out": doc, **facts}


def _optimize_args(experiments: int) -> list[str]:
    return ["optimize", "--headless", "--device", "cuda", "--size", "large", "--max-experiments", str(experiments),
            "--plateau", str(10 * experiments), "--no-integrate"]


def _one_lane_parts(kb: list[str], gpus: int) -> list[list[str]]:
    """The batch's problems dealt round-robin into at most `gpus` one-lane batches.

    One lane runs its problems one after another in one process, so its wall time is the sum of its problems'
    times plus one start: on a box with spare GPUs the one-lane baseline runs as a few such batches side by side
    (each on its own GPU, as the N-lane batch's lanes run) and their walls add up, instead of holding the box
    for the whole sum.
    """
    from autokernel.engine.kernelbench import discover

    problems, _ = discover(kb)
    paths = [str(p.path) for p in problems]
    return [part for part in (paths[k::gpus] for k in range(gpus)) if part]


def _part_name(k: int, parts: int) -> str:
    return "kb_w1" if parts == 1 else f"kb_w1_part{k + 1}"


def _one_lane_sum(done: list[dict]) -> dict:
    """One-lane parts read as one batch: walls added; each part's own figures kept beside."""
    docs = [d["out"] for d in done if d.get("out")]
    rows = [row for doc in docs for row in doc.get("problems", [])]
    return {"name": "kb_w1", "rc": max(d["rc"] for d in done), "wall_s": sum(d["wall_s"] for d in done),
            "parts": done, "out": {"lanes": 1, "problems": rows, "statuses": _count([r.get("status") for r in rows]),
                                   "fast_p": _fast_p_of(rows)} if docs else None,
            "sessions": [s for d in done for s in d.get("sessions", [])]}


def _count(statuses: list) -> dict:
    from autokernel.engine.kernelbench import status_counts

    return status_counts(s for s in statuses if s)


def _fast_p_of(rows: list[dict]) -> dict:
    from autokernel.engine.kernelbench import ProblemResult, fast_p

    return fast_p([ProblemResult.from_json(r) for r in rows])


def _foreign_gpu_processes() -> list[str]:
    """`gpu 2: pid 4711` for each process holding a GPU of this box that is not this script: phase 2 times on
    every GPU, so it must not start while a job beside the benchmark still runs on one."""
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    index = dict(reversed([part.strip() for part in line.split(",")]) for line in gpus.splitlines() if "," in line)
    found = []
    for line in apps.splitlines():
        uuid, _, pid = (part.strip() for part in line.partition(","))
        if pid.isdigit() and int(pid) != os.getpid():
            found.append(f"gpu {index.get(uuid, uuid)}: pid {pid}")
    return found


def _wait_for_free_gpus(limit_s: float) -> list[str]:
    """Wait (up to `limit_s`) until no other process holds a GPU; what still held one when the wait ended."""
    end = time.monotonic() + limit_s
    busy = _foreign_gpu_processes()
    if busy:
        print(f"  waiting for the GPUs to be free: {', '.join(busy)}", flush=True)
    while busy and time.monotonic() < end:
        time.sleep(2)
        busy = _foreign_gpu_processes()
    if busy:
        print(f"  still held after {limit_s:.0f} s, timing anyway: {', '.join(busy)}", flush=True)
    return busy


# With --warmup both, each optimize session runs twice, without and with the parallel warm-up compile
# (engine/precompile.py), so the pool's ratio is read with either setting on the same box.
WARMUP_ENV = "AUTOKERNEL_PARALLEL_COMPILE"
WARMUP_VARIANTS = {"as-set": [("", None)], "both": [("_pc1", "1"), ("_pc0", "0")]}


def sessions(out: Path, experiments: int, kb: list[str], kb_experiments: int, warmup: str = "as-set") -> dict:
    n = gpu_count()
    opt = _optimize_args(experiments)
    batch = ["kernelbench", *kb, "--device", "cuda", "--max-experiments-per-problem", str(kb_experiments)]
    runs: dict[str, dict] = {}
    variants = WARMUP_VARIANTS[warmup]
    if len(variants) > 1 and len(variants) + (1 if kb else 0) > n:
        raise SystemExit(f"--warmup {warmup} with a batch needs {len(variants) + 1} GPUs for phase 1; this box has {n}")

    first_kb = len(variants)  # phase 1: the one-worker sessions on GPUs 0.., the batch's parts on the GPUs after
    parts = _one_lane_parts(kb, max(1, n - first_kb)) if kb else []
    kb_gpu = [str(min(k + first_kb, n - 1)) for k in range(len(parts))]
    print(f"phase 1: one worker each, side by side: the optimize session(s) on GPU(s) 0-{len(variants) - 1}, the batch "
          f"with one lane in {len(parts)} part(s) on GPU(s) {', '.join(kb_gpu) or '-'}", flush=True)
    t = time.monotonic()
    p_opt = [_spawn(opt + ["--workers", "1"], out / f"optimize_w1{tag}", str(k), {WARMUP_ENV: flag} if flag else None)
             for k, (tag, flag) in enumerate(variants)]
    p_kb = [_spawn(["kernelbench", *part, *batch[1 + len(kb):], "--workers", "1"], out / _part_name(k, len(parts)),
                   kb_gpu[k]) for k, part in enumerate(parts)]
    ends = _ends([*p_opt, *p_kb])
    for k, (tag, _) in enumerate(variants):
        runs[f"optimize_w1{tag}"] = _finish(f"optimize_w1{tag}", p_opt[k], out / f"optimize_w1{tag}", t, ends[k])
    if p_kb:
        done = [_finish(_part_name(k, len(parts)), proc, out / _part_name(k, len(parts)), t, end)
                for k, (proc, end) in enumerate(zip(p_kb, ends[len(p_opt):]))]
        runs["kb_w1"] = done[0] if len(done) == 1 else _one_lane_sum(done)

    print(f"phase 2: {n} workers, one per GPU (the batch: {n} problems side by side)", flush=True)
    held = _wait_for_free_gpus(float(os.environ.get("MG_FREE_WAIT_S", "900")))
    if kb:
        t = time.monotonic()
        runs[f"kb_w{n}"] = _finish(f"kb_w{n}", _spawn(batch + ["--workers", str(n)], out / f"kb_w{n}", None),
                                   out / f"kb_w{n}", t)
    for tag, flag in variants:
        name = f"optimize_w{n}{tag}"
        t = time.monotonic()
        runs[name] = _finish(name, _spawn(opt + ["--workers", str(n)], out / name, None,
                                          {WARMUP_ENV: flag} if flag else None), out / name, t)
    result = {"gpus": n, "experiments": experiments, "kb": kb, "kb_experiments": kb_experiments, "warmup": warmup,
              "held_at_phase_2": held, "runs": runs}
    (out / "multigpu.json").write_text(json.dumps(result, indent=1, default=str))
    _print_summary(result)
    return result


def baseline(out: Path, experiments: int) -> dict:
    """`baseline`: phase 1's one-worker optimize session with nothing beside it."""
    name = "optimize_w1"
    t = time.monotonic()
    run = _finish(name, _spawn(_optimize_args(experiments) + ["--workers", "1"], out / name, "0"), out / name, t)
    result = {"gpus": gpu_count(), "experiments": experiments, "runs": {name: run}}
    (out / "baseline.json").write_text(json.dumps(result, indent=1, default=str))
    _print_summary(result)
    return result


def ray_session(out: Path, experiments: int) -> dict:
    """The optimize session again with its workers as Ray actors on this box, added to DIR/multigpu.json."""
    n = gpu_count()
    path = out / "multigpu.json"
    result = json.loads(path.read_text()) if path.exists() else {"gpus": n, "experiments": experiments, "runs": {}}
    try:
        import ray  # noqa: F401
    except ImportError as e:
        result["runs"]["ray"] = {"name": "ray", "skipped": f"ray does not import here: {e}"}
        print(f"ray skipped: {e}", flush=True)
    else:
        name = f"optimize_ray_w{n}"
        t = time.monotonic()
        result["runs"][name] = _finish(name, _spawn(_optimize_args(experiments) + ["--workers", str(n), "--ray", "local"],
                                                    out / name, None), out / name, t)
    path.write_text(json.dumps(result, indent=1, default=str))
    _print_summary(result)
    return result


def fixed_candidates(kernel: str, count: int) -> list[tuple[str, str]]:
    """(label, source) of the first `count` single-knob moves of `kernel`'s starter, in the template's order."""
    from autokernel.playbook.templates import get_template

    template = get_template(kernel)
    moves = [(f"{knob.name}={value!r}", {**template.DEFAULTS, knob.name: value})
             for knob in template.SPACE for value in knob.values if value != template.DEFAULTS[knob.name]]
    return [(label, template.render(params)) for label, params in moves[:count]]


def _candidate_experiment(path: str, kernel: str, shape: dict, dtype: str, done: list):
    """One candidate: checked in `dtype`, timed at `shape` if it passed; `done` gets (worker, passed, ms)."""
    from autokernel.engine.pool import Call

    report = yield Call("check", (path,), {"kernel": kernel, "backend": "triton", "dtypes": [dtype]})
    ms = None
    if report.passed:
        try:
            records = yield Call("bench", (path,), {"kernel": kernel, "shapes": [shape], "dtype": dtype})
            ms = records[0].kernel_ms if records else None
        except RuntimeError:  # it failed while timed: counted as an experiment all the same
            pass
    done.append((report.passed, ms))


def fixed_pool_run(workers: list, candidates: list[tuple[str, str]], folder: Path, kernel: str, shape: dict,
                   dtype: str) -> dict:
    """The candidates through a pool of `workers`: wall time from the first start to the last end."""
    from autokernel.engine.pool import WorkerPool

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (_, source) in enumerate(candidates):
        path = folder / f"{kernel}_{i:03d}.py"
        path.write_text(source)
        paths.append(str(path))
    done: list = []
    pool = WorkerPool(workers)
    t0 = time.monotonic()
    try:
        pool.run(_candidate_experiment(p, kernel, shape, dtype, done) for p in paths)
    finally:
        wall = time.monotonic() - t0
        pool.close()
    return {"workers": len(workers), "candidates": len(done), "passed": sum(1 for ok, _ in done if ok),
            "wall_s": wall, "per_hour": len(done) / wall * 3600 if wall > 0 else None,
            "kernel_ms": [ms for _, ms in done]}


def fixed(out: Path, kernel: str, count: int, dtype: str = "bf16") -> dict:
    """`fixed`: one worker, then one per GPU, each run with its own Triton and Inductor caches."""
    from autokernel.engine.pool import make_workers
    from autokernel.kernels import get_spec

    device = "cuda" if gpu_count() else "cpu"
    n = max(1, gpu_count())
    spec = get_spec(kernel)
    shape = dict(spec.bench_shapes[0] if device == "cuda" else spec.smoke_shape)  # a GPU: the type's first bench shape
    candidates = fixed_candidates(kernel, count)
    runs = []
    for workers in dict.fromkeys((1, n)):
        folder = out / f"fixed_w{workers}"
        os.environ["TRITON_CACHE_DIR"] = str(folder / "triton-cache")  # the workers inherit it
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder / "inductor-cache")
        run = fixed_pool_run(make_workers(device, workers), candidates, folder, kernel, shape, dtype)
        runs.append(run)
        print(f"  {workers} worker(s): {run['candidates']} candidates ({run['passed']} passed) in "
              f"{run['wall_s']:.1f} s = {run['per_hour']:.0f}/h"
              + (f" ({run['per_hour'] / runs[0]['per_hour']:.2f}x one worker)" if workers > 1 else ""), flush=True)
    result = {"kernel": kernel, "shape": shape, "dtype": dtype, "device": device,
              "labels": [label for label, _ in candidates], "runs": runs}
    (out / "fixed.json").write_text(json.dumps(result, indent=1))
    return result


def _print_summary(result: dict) -> None:
    n = result["gpus"]
    print("\noptimize sessions (bundled Llama, large, playbook agent):")
    bases: dict[str, tuple[float, float]] = {}  # per warm-up variant: the one-worker rate and GPUs busy
    for name, run in result["runs"].items():
        if not name.startswith("optimize") or not run.get("sessions"):
            continue
        s = run["sessions"][0]
        # GPU-seconds of experiments per second of the span: unlike experiments per hour, the same whatever mix
        # of cheap and costly targets the session reached
        busy = sum((s.get("busy") or {}).values())
        variant = name.rpartition("_pc")[2] if "_pc" in name else ""
        base, base_busy = bases.setdefault(variant, (s["per_hour"], busy))
        best = ", ".join(f"{t}={b['candidate']}@{b['decided_s']:.0f}s" for t, b in sorted(s["best"].items()))
        print(f"  {name}: {s['experiments']} experiments in {s['span_s']:.0f} s = {s['per_hour']:.0f}/h "
              f"({s['per_hour'] / base:.2f}x one worker, goal >= {0.85 * n:.2f}x for {n}); "
              f"{busy_line(s.get('busy') or {})} ({busy:.2f} GPUs busy, "
              f"{busy / base_busy if base_busy else 0:.2f}x one worker's); best {best}")
    print("\nwhere each optimize session's time went (scripts/session_anatomy.py):")
    for name, run in result["runs"].items():
        if name.startswith("optimize") and run.get("sessions") and run["sessions"][0].get("anatomy"):
            print(describe(f"  {name}", run["sessions"][0]["anatomy"]))
    for name, run in result["runs"].items():
        doc = run.get("out") if name.startswith("kb") else None
        if doc:
            fp = doc.get("fast_p", {})
            parts = " + ".join(f"{part['wall_s']:.0f}" for part in run.get("parts", []))
            own = sum(r.get("seconds") or 0 for r in doc.get("problems", []))
            print(f"  {name}: {doc.get('lanes', 1)} problem(s) at once, {run['wall_s']:.0f} s"
                  + (f" (one-lane parts side by side: {parts})" if parts else "")
                  + f", the problems' own {own:.0f} s; statuses {doc.get('statuses')}; fast_p eager "
                  f"{fp.get('eager')}; compile {fp.get('compile')}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("consistency", "sessions", "ray", "fixed", "baseline"))
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--experiments", type=int, default=12, help="experiments per optimize session")
    p.add_argument("--kb", nargs="*", default=[], help="KernelBench problem folders or files for the batch")
    p.add_argument("--kb-experiments", type=int, default=4)
    p.add_argument("--warmup", choices=sorted(WARMUP_VARIANTS), default="as-set",
                   help="sessions: 'both' runs each optimize session without and with the parallel warm-up compile")
    p.add_argument("--kernel", default="rmsnorm", help="fixed: the kernel type whose starter's moves are run")
    p.add_argument("--candidates", type=int, default=24, help="fixed: how many of those moves")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what == "consistency":
        consistency(out)
    elif args.what == "fixed":
        fixed(out, args.kernel, args.candidates)
    elif args.what == "baseline":
        baseline(out, args.experiments)
    elif args.what == "ray":
        ray_session(out, args.experiments)
    else:
        sessions(out, args.experiments, args.kb, args.kb_experiments, args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
