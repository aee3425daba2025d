"""Turn what `scripts/gpu_suite.sh` wrote on a GPU into the results pages under docs/results/.

    python scripts/gpu_results.py RESULTS_DIR [RESULTS_DIR ...] -o docs/results/h100

Several folders (one per suite run) are merged in order: a later run's file replaces an earlier
one's of the same name, and `check.txt` verdicts of a later run replace the earlier verdict of the
same starter. Each run's raw files are copied to raw/<its folder name>/, so every number can be
traced back to the run that measured it.
Nothing here measures anything: the pages only format what the suite recorded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from autokernel.engine.forward_timing import part_name
from autokernel.kernels import get_spec

RAW = ("versions.txt", "check.txt", "bench.json", "profile.json", "profile.txt", "optimize.json", "optimize.log",
       "pytest_gpu.txt", "kernelbench.json", "hotspots.json", "hotspots.log", "pace.txt", "forward_probe.json",
       "forward_probe.txt", "rowwise_probe.json", "rowwise_probe.txt", "mma_probe.json", "mma_probe.txt")


def _shape(shape: dict) -> str:
    text = "×".join(str(v) for v in shape.values() if not isinstance(v, bool))
    return text + (" causal" if shape.get("causal") else "")


def merged(folders: list[Path]) -> tuple[dict[str, Path], dict[str, str], list[str]]:
    """(latest file per name, starter verdict lines by 'kernel backend', which folder gave what)."""
    files: dict[str, Path] = {}
    verdicts: dict[str, str] = {}
    provenance = []
    for folder in folders:
        for name in RAW:
            if (folder / name).exists():
                files[name] = folder / name
                provenance.append(f"{name}: raw/{folder.name}/{name}")
        if (folder / "check.txt").exists():
            for line in (folder / "check.txt").read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "check":
                    verdicts[f"{parts[1]} {parts[2]}"] = f"{folder.name} {line}"
    return files, verdicts, provenance


def rebenched(folders: list[Path]) -> dict[str, dict]:
    """The latest `rebench_<kernel>.json` per kernel (`scripts/gpu_suite.sh rebench`), by kernel name."""
    found: dict[str, dict] = {}
    for folder in folders:
        for path in sorted(folder.glob("rebench_*.json")):
            found[path.stem[len("rebench_"):]] = {"doc": json.loads(path.read_text()), "run": folder.name}
    return found


def latest_rows(bench: dict, again: dict[str, dict]) -> list[dict]:
    """The full bench's rows, each replaced by a later re-bench of the same kernel, backend and shape (each row's
    eager and torch.compile were timed in its own run, so its speedups stay within one run)."""
    later = {(r["kernel"], r["backend"], _shape(r["shape"])): r for item in again.values() for r in item["doc"]["results"]}
    return [later.get((r["kernel"], r["backend"], _shape(r["shape"])), r) for r in bench["results"]]


def rebench_section(bench: dict, again: dict[str, dict]) -> list[str]:
    """Each re-benched kernel's shapes beside the full bench's numbers for them: whether an outlier of the
    full bench comes back (the full bench's rows above stay as they were measured)."""
    if not again:
        return []
    first = {(r["kernel"], r["backend"], _shape(r["shape"])): r for r in bench["results"]}
    out = ["", "## Re-benched (`scripts/gpu_suite.sh rebench`, Triton only, a later run)", "",
           "| kernel | shape | full bench ms | re-bench ms | re-bench % of ceiling | re-bench × eager | re-bench × compile | run |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for kernel, item in again.items():
        for r in item["doc"]["results"]:
            before = first.get((r["kernel"], r["backend"], _shape(r["shape"])))
            out.append(f"| {kernel} | {_shape(r['shape'])} | {_num(before and before['kernel_ms'], '.4f')} | "
                       f"{r['kernel_ms']:.4f} | {100 * r['fraction_of_ceiling']:.0f}% | "
                       f"{_num(r.get('speedup_eager'), '.2f')} | {_num(r.get('speedup_compile'), '.2f')} | {item['run']} |")
    return out


def bench_page(bench: dict, versions: str, again: dict[str, dict] | None = None) -> str:
    """The bench table. A record without `baseline` predates the idiomatic eager baselines: its eager
    and compile columns were timed against the fp32 reference, so they are shown only for kernels
    whose reference is the idiomatic form anyway."""
    ceil = bench["ceilings"]
    out = [
        "# Kernel library on the H100: every starter against eager PyTorch and torch.compile", "",
        "```", versions.strip(), "```", "",
        f"Measured ceilings (same run): copy {ceil['bandwidth_gbs']:.0f} GB/s (read + write), "
        f"bf16 matmul {ceil['matmul_tflops']['bf16']:.0f} TFLOP/s (torch.mm 8192³). dtype bf16, "
        "median of `triton.testing.do_bench` (L2 flushed, rotated random inputs).", "",
    ]
    sized = any(r.get("copy_gbs") for r in bench["results"])
    out += ["| kernel | backend | shape | ms | achieved | % of ceiling |" + (" % copy@size |" if sized else "")
            + " eager ms | compile ms | × eager | × compile |",
            "|---|---|---|---:|---:|---:|" + ("---:|" if sized else "") + "---:|---:|---:|---:|"]
    stale = False
    for r in bench["results"]:
        spec = get_spec(r["kernel"])
        comparable = "baseline" in r or spec.baseline is None
        stale |= not comparable
        achieved = f"{r['achieved']:,.0f} {r['metric']}"
        if comparable:
            eager = f"{r['eager_ms']:.4f}"
            comp = "—" if r["compile_ms"] is None else f"{r['compile_ms']:.4f}"
            xe = f"{r['speedup_eager']:.2f}"
            xc = "—" if r["speedup_compile"] is None else f"{r['speedup_compile']:.2f}"
        else:
            eager = comp = xe = xc = "†"
        at_size = (f" {100 * r['achieved'] / r['copy_gbs']:.0f}% |" if r.get("copy_gbs") else " — |") if sized else ""
        out.append(f"| {r['kernel']} | {r['backend']} | {_shape(r['shape'])} | {r['kernel_ms']:.4f} | {achieved} | "
                   f"{100 * r['fraction_of_ceiling']:.0f}% |{at_size} {eager} | {comp} | {xe} | {xc} |")
    if sized:
        out += ["", "% copy@size: the kernel's GB/s over a plain device copy (`dst.copy_(src)`) that moves the same "
                "bytes, timed in the same run (do_bench, L2 flushed): what full bandwidth means at that size."]
    if stale:
        out += ["", "† Not shown: this run timed eager and torch.compile on the fp32 reference (the correctness "
                "judge, e.g. an fp32 matmul for bf16 inputs), not on idiomatic PyTorch in bf16, which made "
                "those speedups 5–15× too large. The kernel's own time, throughput and fraction of the ceiling "
                "are unaffected. rmsnorm (Llama's fp32 form) and cross_entropy (fp32 logits, as HF computes "
                "the loss) have the idiomatic form as their reference, so their columns stand."]
    out += targets_section(bench, latest_rows(bench, again or {}))
    out += rebench_section(bench, again or {})
    if bench.get("failed"):
        out += ["", "## Starters that failed the harness in this run (not timed)", ""]
        out += [f"- {f['kernel']} ({f['backend']}): {f['reason']}" for f in bench["failed"]]
    return "\n".join(out) + "\n"


MEMORY_BOUND = ("softmax", "layernorm", "rmsnorm", "cross_entropy", "rotary_embedding", "reduce")


def _comparable(r: dict) -> bool:
    return "baseline" in r or get_spec(r["kernel"]).baseline is None


def _target_row(name: str, measured: str, met: bool | None) -> str:
    verdict = "not measured in this run" if met is None else ("met" if met else "**missed**")
    return f"| {name} | {measured} | {verdict} |"


def targets_section(bench: dict, rows: list[dict]) -> list[str]:
    """Issue 4's targets, each with what was measured and whether it is met (None: not measured). `rows`: the
    latest measurement of each kernel and shape (`latest_rows`); the CUDA-against-Triton ratio compares the
    two backends within the full bench's own run."""
    out = ["", "## The kernel library's targets", "",
           "Judged on the latest measurement of each kernel and shape: the full bench above, with the rows of "
           "the re-bench section below (later runs, the code as it is now) in place of its own; the CUDA "
           "against Triton ratio within the full bench's run.", "",
           "| target | measured | verdict |", "|---|---|---|"]
    for kind in MEMORY_BOUND:
        mine = [r for r in rows if r["kernel"] == kind and r["backend"] == "triton"]
        if not mine:
            out.append(_target_row(f"{kind} (Triton) ≥ 90% of copy bandwidth at every shape", "—", None))
            continue
        low = [r for r in mine if r["fraction_of_ceiling"] < 0.9]
        worst = min(mine, key=lambda r: r["fraction_of_ceiling"])
        copy_note = (f" (a plain copy of the same bytes: {100 * worst['copy_gbs'] / worst['ceiling']:.0f}%)"
                     if worst.get("copy_gbs") else "")
        out.append(_target_row(
            f"{kind} (Triton) ≥ 90% of copy bandwidth at every shape",
            f"{len(mine) - len(low)} of {len(mine)} shapes; lowest {100 * worst['fraction_of_ceiling']:.0f}% at "
            f"{_shape(worst['shape'])}{copy_note}", not low))
        timed = [r for r in mine if _comparable(r) and r.get("speedup_compile")]
        if timed:
            slow = [r for r in timed if r["speedup_compile"] < 1.0]
            worst = min(timed, key=lambda r: r["speedup_compile"])
            out.append(_target_row(f"{kind} (Triton) not slower than torch.compile at any shape",
                                   f"{len(timed) - len(slow)} of {len(timed)} shapes; lowest "
                                   f"{worst['speedup_compile']:.2f}× at {_shape(worst['shape'])}", not slow))
        else:
            out.append(_target_row(f"{kind} (Triton) not slower than torch.compile at any shape", "—", None))
    for kind, what, need, pick in (
            ("matmul", "matmul (Triton) ≥ 90% of torch.matmul at 4096³ and 8192³", 0.9,
             lambda r: r["shape"].get("M") == r["shape"].get("N") == r["shape"].get("K") in (4096, 8192)),
            ("fused_mlp", "fused_mlp (Triton) at least as fast as eager three-matmul SwiGLU", 1.0, lambda r: True),
            ("flash_attention", "flash_attention (Triton) ≥ 70% of SDPA at head dim 128, seq 4096", 0.7,
             lambda r: r["shape"].get("D", r["shape"].get("head_dim")) == 128
             and r["shape"].get("S", r["shape"].get("seq")) == 4096)):
        mine = [r for r in rows if r["kernel"] == kind and r["backend"] == "triton" and pick(r) and _comparable(r)]
        if not mine:
            out.append(_target_row(what, "—", None))
            continue
        worst = min(mine, key=lambda r: r["speedup_eager"])
        out.append(_target_row(what, f"lowest {worst['speedup_eager']:.2f}× eager at {_shape(worst['shape'])}",
                               all(r["speedup_eager"] >= need for r in mine)))
    full = bench["results"]
    triton = {(r["kernel"], json.dumps(r["shape"], sort_keys=True)): r for r in full if r["backend"] == "triton"}
    ratios = []
    for r in full:
        t = triton.get((r["kernel"], json.dumps(r["shape"], sort_keys=True)))
        if r["backend"] == "cuda" and t and r["kernel_ms"] > 0:
            ratios.append((t["kernel_ms"] / r["kernel_ms"], r))
    if ratios:
        low = [x for x in ratios if x[0] < 0.7]
        worst = min(ratios, key=lambda x: x[0])
        wins = sorted({r["kernel"] for ratio, r in ratios if ratio > 1.02})
        out.append(_target_row(
            "CUDA C++ starters ≥ 70% of the Triton starter's throughput",
            f"{len(ratios) - len(low)} of {len(ratios)} shapes; lowest {worst[0]:.2f} ({worst[1]['kernel']} "
            f"{_shape(worst[1]['shape'])})" + (f"; CUDA is faster somewhere for {', '.join(wins)}" if wins else ""),
            not low))
    return out


def kernelbench_page(report: dict, versions: str) -> str:
    """The batch's score table and fast_p, as `autokernel kernelbench` printed them, from its --json."""
    import io

    from autokernel.engine.commands.kernelbench import print_report

    text = io.StringIO()
    print_report(report, text)
    return "\n".join([
        "# KernelBench mode on the H100: our own problem files", "", "```", versions.strip(), "```", "",
        f"`{report.get('command') or 'autokernel kernelbench tests/kernelbench_problems --device cuda --json'}` "
        "(`scripts/gpu_suite.sh kernelbench`): each problem profiled, its "
        "bottlenecks optimized by the playbook agent, a standalone ModelNew assembled from the kept kernels, "
        "checked KernelBench's way (fresh inputs, atol = rtol = 1e-2) and timed against the problem's Model "
        "eager and under torch.compile.", "", "```", text.getvalue().rstrip(), "```"]) + "\n"


def checks_page(verdicts: dict[str, str], versions: str) -> str:
    out = ["# The 18 starters through the five stages on the H100", "", "```", versions.strip(), "```", "",
           "`autokernel check --kernel K --backend B --device cuda --json`, six at a time "
           "(`scripts/gpu_suite.sh check`). Each verdict is the latest run's for that starter; the raw "
           "lines of every run are under raw/.", "", "| kernel | backend | verdict | run |", "|---|---|---|---|"]
    for key in sorted(verdicts):
        kernel, backend = key.split()
        run, line = verdicts[key].split(" ", 1)
        verdict = "PASS" if " PASS" in line else line.split(" rc=", 1)[-1].split(" ", 1)[-1]
        out.append(f"| {kernel} | {backend} | {verdict} | {run} |")
    return "\n".join(out) + "\n"


def profile_page(profile: dict, table: str, versions: str) -> str:
    rows = profile["rows"]
    out = ["# Where the bundled Llama (large) spends its time on the H100", "", "```", versions.strip(), "```", "",
           "`autokernel profile --device cuda --size large` (the bundled Llama example): "
           f"{profile['total_ms']:.2f} ms per forward ({profile['attributed_ms']:.2f} ms attributed to rows). "
           "Ranked by S, the whole model's speedup if that row reached its floor (Amdahl); s is the row's "
           "own speedup at its floor (floor: bytes over the measured copy bandwidth or FLOPs over the "
           "measured matmul rate, whichever is larger).", "",
           "| # | kind | name | calls | self ms | share | floor ms | s | S |", "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for i, r in enumerate(rows, 1):
        s = "∞" if r["kernel_speedup"] is None else f"{r['kernel_speedup']:.2f}"
        out.append(f"| {i} | {r['kind']} | {r['name']} | {r['calls']:g} | {r['self_ms']:.3f} | {100 * r['share']:.1f}% | "
                   f"{r['floor_ms']:.4g} | {s} | {r['max_speedup']:.3f} |")
    out += ["", "As the command prints it:", "", "```", table.rstrip(), "```"]
    return "\n".join(out) + "\n"


def _num(value: float | None, fmt: str) -> str:
    """A number, or — where none was measured (torch.compile failed, or a CPU run)."""
    return "—" if value is None else format(value, fmt)


def _pace(per: dict | None) -> str:
    """' Per experiment (written to decided): median 7.9 s, slowest 21 s; stages (median s): ...'."""
    if not per:
        return ""
    stages = ", ".join(f"{k} {v:.2g}" for k, v in per.get("stages_median", {}).items())
    return (f" Per experiment (written to decided, {per['count']} of them): median {per['median']:.3g} s, slowest "
            f"{per['max']:.3g} s" + (f"; stages, median s: {stages}" if stages else "") + ".")


def optimize_page(opt: dict, log: str, title: str = "One optimize session on the bundled Llama (large) on the H100",
                  intro: str = "") -> str:
    out = [f"# {title}", "", *([intro, ""] if intro else []),
           f"Session `{opt['session_id']}`: {opt['experiments']} experiments, {opt['ideas']} ideas."
           + _pace(opt.get("experiment_seconds")), "",
           "| target | shape | dtype | status | experiments | best | best ms | × eager | × compile | % ceiling |"]
    sized = any(t.get("fraction_of_copy") for t in opt["targets"])
    out[-1] += " % copy@size |" if sized else ""
    out.append("|---|---|---|---|---:|---|---:|---:|---:|---:|" + ("---:|" if sized else ""))
    for t in opt["targets"]:
        xc = "—" if t.get("speedup_compile") is None else f"{t['speedup_compile']:.2f}"
        at_size = (f" {100 * t['fraction_of_copy']:.0f}% |" if t.get("fraction_of_copy") else " — |") if sized else ""
        out.append(f"| {t['target']} | {_shape(t['shape'])} | {t['dtype']} | {t['status']} | {t['experiments']} | "
                   f"{t['best_label']} | {t['best_ms']:.4f} | {t['speedup_eager']:.2f} | {xc} | "
                   f"{100 * t['fraction_of_ceiling']:.0f}% |{at_size}")
    if sized:
        out += ["", "% copy@size: the best kernel's GB/s over a plain device copy that moves the same bytes, "
                "timed in the same session: what full bandwidth means at that size."]
    integ = opt.get("integration")
    if integ:
        out += ["", "Integration (the kept kernels swapped into the model, outputs compared, forward timed):", "",
                f"- correct: {integ['correct']} ({integ['detail']}; max abs error {integ['max_abs_error']:.4g})",
                f"- forward: {integ['model_ms']:.3f} ms with the kernels, eager {integ['eager_ms']:.3f} ms, "
                f"torch.compile {_num(integ.get('compile_ms'), '.3f')} ms: {integ['speedup_eager']:.2f}× eager, "
                f"{_num(integ.get('speedup_compile'), '.2f')}× torch.compile"]
        if integ.get("sites"):
            out += ["", "Where the forward's time went, before and after the swap (device events around each "
                    "swapped module; the two models take turns, ABBA, over several forwards):", "", "| part | before ms | after ms |", "|---|---:|---:|"]
            out += [f"| {part_name(r)} | "
                    f"{r['before_ms']:.3f} | {r['after_ms']:.3f} |" for r in integ["sites"]]
    out += ["", "The experiments, as the headless run printed them:", "", "```",
            *[ln for ln in log.splitlines() if ln.startswith(("#", "==", "integration", "   "))], "```"]
    return "\n".join(out) + "\n"


def forward_page(probe: dict, versions: str) -> str:
    """scripts/forward_probe.py's table: each variant of the Llama forward, host against device time."""
    out = ["# Where the patched Llama forward spends its time on the H100", "", "```", versions.strip(), "```", "",
           "`python scripts/forward_probe.py` (`scripts/gpu_suite.sh probe`): the bundled Llama (large, bf16) with "
           "the Triton starters swapped in by `kernel_patch.patch`, variant by variant. forward: "
           "`triton.testing.do_bench` median; host: how long one forward takes to return from an idle GPU (near "
           "the forward's time, the GPU waits on the host); kernels: the GPU kernels' durations in one forward "
           "(torch.profiler; profiled forwards run a little slower, so idle = forward - kernels can go below 0).", "",
           "| variant | forward ms | × eager | host ms | kernels ms | idle ms |", "|---|---:|---:|---:|---:|---:|"]
    variants = probe["variants"]
    eager = variants.get("eager", {}).get("forward_ms")
    for name, v in variants.items():
        x = f"{eager / v['forward_ms']:.2f}" if eager else "—"
        out.append(f"| {name} | {v['forward_ms']:.3f} | {x} | {v['host_ms']:.3f} | {v['kernel_ms']:.3f} | "
                   f"{v['forward_ms'] - v['kernel_ms']:.3f} |")
    for name, v in variants.items():
        out += ["", f"Top kernels, {name} (ms per forward, calls per forward):", "", "| ms | calls | kernel |",
                "|---:|---:|---|"]
        out += [f"| {ms:.3f} | {calls} | `{k}` |" for k, ms, calls in v["top"][:8]]
    return "\n".join(out) + "\n"


def rowwise_page(probes: list[tuple[str, dict]], versions: str) -> str:
    """scripts/rowwise_probe.py's tables: forms of each row-wise kernel, fastest first, against a same-size copy.
    `probes`: (run, probe) oldest first; each kernel and shape is shown from the latest run that probed it."""
    latest: dict[tuple[str, str], tuple[str, dict]] = {}
    for run, probe in probes:
        for row in probe["shapes"]:
            latest[(row["kernel"], _shape(row["shape"]))] = (run, row)
    rounds = sorted({probe["rounds"] for _, probe in probes})
    out = ["# Forms of the row-wise kernels, timed side by side on the H100", "", "```", versions.strip(), "```", "",
           "`python scripts/rowwise_probe.py` (`scripts/gpu_suite.sh rowwise`; both as of commit f73dfd6, removed since: the probe carried its own copies of the kernels), bf16: each form timed as the harness "
           f"times a candidate (fresh data and an L2 flush before every call, CUDA events, median), "
           f"{'/'.join(map(str, rounds))} interleaved rounds, the median of the rounds shown; spread: (slowest round - "
           "fastest) / median. % ceiling: of the run's copy ceiling (a 2 GiB device copy, ~3.0 TB/s). Every form's "
           "output was checked against the reference first. What the starters and templates took from it is in "
           "their docstrings. Each table is from the latest run that probed that kernel and shape."]
    for (kernel, shape), (run, row) in latest.items():
        copy = row.get("copy_gbs_at")
        out += ["", f"## {kernel} {shape} ({row['bytes'] / 1e6:.0f} MB moved; {run})", "",
                "| form | ms | GB/s | % ceiling | % same-size copy | spread |", "|---|---:|---:|---:|---:|---:|"]
        for name, f in sorted(row["forms"].items(), key=lambda kv: kv[1]["ms"]):
            spread = (max(f["rounds"]) - min(f["rounds"])) / f["ms"]
            of_copy = f"{100 * f['gbs'] / copy:.0f}%" if copy else "—"
            out.append(f"| {name} | {f['ms']:.4f} | {f['gbs']:,.0f} | {100 * f['of_ceiling']:.1f}% | {of_copy} | "
                       f"{100 * spread:.1f}% |")
        out += [f"| {name}: **failed** ({why}) | | | | | |" for name, why in row.get("errors", {}).items()]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="result folders of scripts/gpu_suite.sh, oldest first")
    p.add_argument("-o", "--out", type=Path, required=True, help="folder for the pages (e.g. docs/results/h100)")
    args = p.parse_args(argv)
    files, verdicts, provenance = merged(args.folders)
    if not files:
        print("gpu_results: no suite results in " + ", ".join(map(str, args.folders)), file=sys.stderr)
        return 2
    raw = args.out / "raw"
    for folder in args.folders:
        for name in RAW:
            if (folder / name).exists():
                (raw / folder.name).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, raw / folder.name / name)
        for path in sorted(folder.glob("rebench_*.json")):
            (raw / folder.name).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, raw / folder.name / path.name)
            provenance.append(f"{path.name}: raw/{folder.name}/{path.name}")
    versions = files["versions.txt"].read_text() if "versions.txt" in files else "(versions not recorded)"
    written = []
    if "bench.json" in files:
        bench_run = args.folders.index(files["bench.json"].parent)
        again = rebenched(args.folders[bench_run + 1:])  # only re-benches after the full bench
        (args.out / "bench.md").write_text(bench_page(json.loads(files["bench.json"].read_text()), versions, again))
        written.append("bench.md")
    if verdicts:
        (args.out / "checks.md").write_text(checks_page(verdicts, versions))
        written.append("checks.md")
    if "profile.json" in files:
        table = files["profile.txt"].read_text() if "profile.txt" in files else ""
        (args.out / "profile.md").write_text(profile_page(json.loads(files["profile.json"].read_text()), table, versions))
        written.append("profile.md")
    if "optimize.json" in files:
        log = files["optimize.log"].read_text() if "optimize.log" in files else ""
        (args.out / "optimize.md").write_text(optimize_page(json.loads(files["optimize.json"].read_text()), log))
        written.append("optimize.md")
    if "hotspots.json" in files:
        log = files["hotspots.log"].read_text() if "hotspots.log" in files else ""
        hot = json.loads(files["hotspots.json"].read_text())
        reached = {t["target"]: (t.get("fraction_of_ceiling") or 0.0) >= 0.9 for t in hot["targets"]}
        intro = ("`scripts/gpu_suite.sh hotspots`: `autokernel optimize llama_hotspots --headless --device cuda "
                 "--size large` with the playbook agent, from the starters (issue 5's target: rmsnorm, softmax and "
                 "cross_entropy at the Llama example's shapes at 90% of copy bandwidth within 100 experiments). "
                 "Reached 90%: " + (", ".join(f"{k} {'yes' if v else 'no'}" for k, v in reached.items()) or "none"))
        (args.out / "hotspots.md").write_text(optimize_page(hot, log, "The Llama's memory-bound hot spots, optimized on "
                                                             "the H100", intro))
        written.append("hotspots.md")
    if "forward_probe.json" in files:
        (args.out / "forward.md").write_text(forward_page(json.loads(files["forward_probe.json"].read_text()), versions))
        written.append("forward.md")
    probes = [(f.name, json.loads((f / "rowwise_probe.json").read_text())) for f in args.folders
              if (f / "rowwise_probe.json").exists()]
    if probes:
        (args.out / "rowwise.md").write_text(rowwise_page(probes, versions))
        written.append("rowwise.md")
    if "kernelbench.json" in files:
        (args.out / "kernelbench.md").write_text(kernelbench_page(json.loads(files["kernelbench.json"].read_text()),
                                                                 versions))
        written.append("kernelbench.md")
    (raw / "PROVENANCE.txt").write_text("the pages were made from (a later run's file replaces an earlier one's):\n"
                                        + "\n".join(provenance) + "\n")
    print("wrote " + ", ".join(str(args.out / w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
