"""The Triton kernel library: every starter passes the harness's five stages; the specs are sound.

The starters are checked the way the optimize loop checks a candidate: by a worker process, which on
a machine without a GPU runs them under Triton's interpreter on each spec's small shapes. Wrong
variants of some starters must fail, so a spec too lax to tell right from wrong is caught too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from autokernel.engine.results import STAGES
from autokernel.engine.worker import Worker
from autokernel.kernels import all_specs, get_spec

MY_KERNELS = ("cross_entropy", "layernorm", "reduce", "rotary_embedding", "matmul", "fused_mlp", "flash_attention")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
L2_BYTES = 50 * 1024 * 1024


@pytest.fixture(scope="module")
def worker():
    """One worker process for the module, as the optimize loop uses it (interpreter on CPU)."""
    w = Worker(device=DEVICE)
    yield w
    w.close()


@pytest.mark.parametrize("name", MY_KERNELS)
def test_triton_starter_passes_the_five_stages(worker, name):
    seen = []
    report = worker.check(str(get_spec(name).starters["triton"]), kernel=name,
                          on_stage=lambda stage, status, detail, seconds: seen.append((stage, status)))
    failure = report.first_failure
    assert report.passed, f"{name}: {report.error or (failure.name + ': ' + failure.detail if failure else '?')}"
    assert [s.name for s in report.stages] == list(STAGES)
    assert [st for st, status in seen if status == "pass"] == list(STAGES)
    sweep = next(s for s in report.stages if s.name == "shape_sweep")
    assert not sweep.detail.startswith("0 shapes"), f"{name}: no sweep shape is small enough for this device"


# Wrong variants of the starters: the spec (reference, inputs, tolerance) must catch each one.
MUTANTS = {
    "cross_entropy": ("tl.sum(acc, axis=0) / tl.sum(n, axis=0)", "tl.sum(acc, axis=0) / rows"),  # ignored rows counted
    "layernorm": ("* w[None, :] + b[None, :]", "* w[None, :]"),  # bias dropped
    "rotary_embedding": ("tl.where(first, -partner, partner)", "tl.where(first, partner, -partner)"),  # rotation sign
    "reduce": ("other=0.0,\n                           eviction_policy", "other=1.0,\n                           eviction_policy"),  # tail padding counted
    "fused_mlp": ("(c % 2 == 1)", "(c % 2 == 0)"),  # pointer form (fp32 inputs): gate and up swapped
    "fused_mlp/tma": ("g = tl.dot(x, _widened(wg_desc", "g = tl.dot(x, _widened(wu_desc"),  # descriptor form (16-bit): up read twice
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_wrong_variant_of_the_starter_fails(worker, mutant, tmp_path):
    name = mutant.split("/")[0]
    old, new = MUTANTS[mutant]
    source = get_spec(name).starters["triton"].read_text()
    assert old in source, f"mutation site gone from the {name} starter"
    mutant = tmp_path / "candidate.py"
    mutant.write_text(source.replace(old, new))
    report = worker.check(str(mutant), kernel=name)
    assert not report.passed
    assert report.first_failure is not None and "error" in report.first_failure.detail


@pytest.mark.parametrize("name", MY_KERNELS)
def test_spec_is_complete_and_consistent(name):
    spec = get_spec(name)
    assert spec.name == name and spec.signature.startswith("kernel_fn(")
    assert "triton" in spec.backends and spec.starters["triton"].name == "starter_triton.py"
    assert set(spec.tolerances) == set(spec.dtypes) == {torch.float32, torch.float16, torch.bfloat16}
    assert spec.metric == ("TFLOP/s" if name in ("matmul", "fused_mlp", "flash_attention") else "GB/s")
    assert spec.forbidden_ops or name == "rotary_embedding"
    assert all(op.startswith("aten::") for op in spec.forbidden_ops)
    # Sizes that are not powers of two in the sweep, sizes of 1 among the edge shapes.
    ints = lambda s: [v for v in s.values() if not isinstance(v, bool)]
    assert any(v & (v - 1) for s in spec.sweep_shapes for v in ints(s))
    assert any(1 in ints(s) for s in spec.edge_shapes)
    # Bench shapes spill out of H100's 50 MB L2 even in bf16, so bandwidth is DRAM bandwidth.
    for shape in spec.bench_shapes:
        assert spec.bytes_moved(shape, torch.bfloat16) > L2_BYTES, shape
        assert spec.flops(shape, torch.bfloat16) > 0
    # shape_from_args inverts make_inputs (small shapes; big ones would allocate gigabytes).
    gen = torch.Generator().manual_seed(5)
    for shape in [spec.smoke_shape, *spec.edge_shapes]:
        args = spec.make_inputs(shape, torch.float32, "cpu", gen, "normal")
        assert dict(spec.shape_from_args(*args)) == dict(shape)


def test_shape_tables_cover_llm_scale():
    vocabs = {s["vocab"] for s in get_spec("cross_entropy").sweep_shapes}
    assert {32000, 50257, 128256} <= vocabs
    attention = get_spec("flash_attention")
    assert {64, 128} <= {s["head_dim"] for s in attention.sweep_shapes}
    assert {True, False} == {s["causal"] for s in attention.sweep_shapes} == {s["causal"] for s in attention.bench_shapes}
    assert {"M": 4096, "N": 4096, "K": 4096} in get_spec("matmul").bench_shapes
    assert {"M": 8192, "N": 8192, "K": 8192} in get_spec("matmul").bench_shapes


def test_flop_counts_follow_the_definitions():
    assert get_spec("matmul").flops({"M": 3, "N": 5, "K": 7}, torch.float16) == 2 * 3 * 5 * 7
    mlp = {"tokens": 4, "hidden": 8, "intermediate": 16}
    assert get_spec("fused_mlp").flops(mlp, torch.float16) == 3 * 2 * 4 * 8 * 16
    att = {"batch": 2, "heads": 3, "seq": 10, "head_dim": 64, "causal": False}
    full = get_spec("flash_attention").flops(att, torch.float16)
    assert full == 4 * 2 * 3 * 10 * 10 * 64
    assert get_spec("flash_attention").flops({**att, "causal": True}, torch.float16) == full // 2


def test_cross_entropy_targets_are_real_classes_or_ignored():
    """Targets are classes, plus about one row in eight of -100 (ignored, F.cross_entropy's default), never
    the first row, so every kernel is checked on padded rows and some row always counts."""
    spec = get_spec("cross_entropy")
    logits, targets = spec.make_inputs({"rows": 500, "vocab": 7}, torch.float16, "cpu", torch.Generator().manual_seed(6), "normal")
    real = targets[targets != -100]
    assert targets.dtype == torch.int64 and int(real.min()) >= 0 and int(real.max()) < 7
    assert 30 < int((targets == -100).sum()) < 100 and int(targets[0]) != -100
    loss = spec.reference(logits, targets)
    assert loss.dtype == torch.float32 and loss.dim() == 0
    kept = targets != -100
    assert torch.allclose(loss, spec.reference(logits[kept], targets[kept]))


def _autokernel(*argv):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "autokernel.engine.cli", *argv],
                          capture_output=True, text=True, timeout=120, env=env)


def test_kernels_command_lists_types_as_json():
    done = _autokernel("kernels", "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    by_name = {k["name"]: k for k in listed}
    assert set(MY_KERNELS) <= set(by_name)
    for entry in listed:
        assert set(entry) == {"name", "backends", "signature", "metric"}
        assert entry["metric"] in ("GB/s", "TFLOP/s")
    assert "triton" in by_name["matmul"]["backends"]
    assert by_name["cross_entropy"]["signature"] == "kernel_fn(logits, targets)"
    assert by_name["flash_attention"]["metric"] == "TFLOP/s" and by_name["reduce"]["metric"] == "GB/s"


def test_kernels_command_prints_a_table():
    done = _autokernel("kernels")
    assert done.returncode == 0, done.stderr
    for name in MY_KERNELS:
        assert name in done.stdout
    assert "kernel_fn(x, weight, bias, eps=1e-5)" in done.stdout


def test_bench_command_checks_times_and_records_each_starter(tmp_path):
    """`autokernel bench` on the CPU: the starter is checked, timed against eager (no torch.compile on a CPU),
    recorded in the store as a bench session, and the progress says how long each step took."""
    from autokernel.engine import events as ev
    from autokernel.engine.store import Store

    db = tmp_path / "s.db"
    done = _autokernel("bench", "--kernel", "rmsnorm", "--backend", "triton", "--device", "cpu", "--dtype", "fp32",
                       "--json", "--db", str(db))
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["failed"] == [] and not doc["meaningful"] and doc["results"]
    for r in doc["results"]:
        assert r["kernel"] == "rmsnorm" and r["backend"] == "triton" and r["kernel_ms"] > 0 and r["eager_ms"] > 0
        assert r["compile_ms"] is None and "not timed on CPU" in r["note"]
    assert re.search(r"rmsnorm \(triton\): checking \.\.\. [0-9.]+ s", done.stderr), done.stderr
    assert re.search(r"timing \S+ fp32 \.\.\. [0-9.]+ ms \([0-9.]+ s\)", done.stderr), done.stderr
    recorded = [e for _, e in Store(db).events(doc["session"]) if isinstance(e, ev.BenchResult)]
    assert len(recorded) == len(doc["results"]) and recorded[0].candidate_id == "starter:rmsnorm:triton"


def test_bench_table_on_the_cpu_names_no_ceiling(tmp_path):
    """The CPU table's title read "ceilings: copy 62 GB/s, matmul 0 TFLOP/s": ceilings mean nothing there."""
    done = _autokernel("bench", "--kernel", "rmsnorm", "--backend", "triton", "--device", "cpu", "--no-compile",
                       "--db", str(tmp_path / "s.db"))
    assert done.returncode == 0, done.stderr[-2000:]
    head, _, rows = done.stdout.partition("┃ kernel")
    assert "no ceilings on the CPU" in head and "TFLOP/s" not in head and "GB/s" not in head, head
    row = next(line for line in rows.splitlines() if line.startswith("│ rmsnorm"))
    assert [c.strip() for c in row.strip("│").split("│")][5] == "-"  # the % ceiling column
    assert not re.search(r"\b0 (TFLOP|GB)/s", done.stdout)


def test_bench_title_never_prints_a_zero_ceiling():
    from autokernel.engine.commands.bench import table_title
    from autokernel.engine.roofline import Ceilings

    gpu = Ceilings(device_name="GPU", bandwidth_gbs=3350.0, matmul_tflops={"fp32": 0.4, "bf16": 989.0},
                   measured=False, device="cuda")
    assert table_title(gpu, "bf16") == "GPU, bf16; ceilings: copy 3,350 GB/s, matmul 989 TFLOP/s"
    assert table_title(gpu, "fp32").endswith("matmul 0.4 TFLOP/s")
    unmeasured = Ceilings(device_name="GPU", bandwidth_gbs=0.0, matmul_tflops={"fp32": 0.0}, measured=False, device="cuda")
    assert table_title(unmeasured, "fp32").endswith("ceilings: copy not measured, matmul not measured")


# The interpreter runs kernels as Python, so only the compiler sees some errors (types it cannot
# lower, a shared-memory layout ptxas rejects). A candidate's Triton launches (a kernel type's template
# rendered with some params: at {} the starter itself) are captured on CPU tensors (nothing runs) and
# compiled for sm_90 through ptxas, as an H100 would. One script for every such test.
COMPILE_FOR_HOPPER = r'''
import importlib.util, json, sys, tempfile, warnings
warnings.simplefilter("ignore")
import torch, triton
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction
from autokernel.playbook.templates import complete, get_template

if "nvidia" not in triton.backends.backends:
    print(json.dumps({"skip": "this Triton has no NVIDIA backend"})); sys.exit(0)
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

captured = []
JITFunction.run = lambda self, *args, grid, warmup=False, **kw: captured.append((self, args, kw))
Autotuner.run = lambda self, *args, **kw: self.fn.run(*args, **{**kw, **self.configs[0].all_kwargs()})
POINTEE = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32", torch.int64: "*i64",
           torch.int32: "*i32"}

def signature(fn, args, kw):
    given = {p.name: p.default for p in fn.params if p.has_default}  # a parameter left at its default
    given.update({**dict(zip(fn.arg_names, args)), **{k: v for k, v in kw.items() if k in fn.arg_names}})
    sig, consts = {}, {}
    for i, name in enumerate(fn.arg_names):
        value = given[name]
        if i in fn.constexprs:
            sig[name], consts[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            sig[name] = POINTEE[value.dtype]
        elif isinstance(value, bool):
            sig[name] = "i1"
        elif isinstance(value, float):
            sig[name] = "fp32"
        else:
            sig[name] = "i32" if -2**31 <= value < 2**31 else "i64"
    return sig, consts

errors = {}
for n, (label, kernel, params, arg_specs) in enumerate(json.loads(sys.argv[1])):
    template = get_template(kernel)
    path = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False).name
    with open(path, "w") as f:
        f.write(template.render(complete(template, params)))
    spec = importlib.util.spec_from_file_location(f"candidate_{n}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = [torch.empty(a[0], dtype=getattr(torch, a[1])) if isinstance(a, list) else a for a in arg_specs]
    captured.clear()
    try:
        module.kernel_fn(*args)
        assert captured, "no Triton launch"
        for fn, a, kw in captured:
            sig, consts = signature(fn, a, kw)
            options = {k: kw[k] for k in ("num_warps", "num_stages") if kw.get(k) is not None}
            triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                           options=options)
    except Exception as e:
        if "ptxas" in str(e) and "not found" in str(e).lower():
            print(json.dumps({"skip": "no ptxas here"})); sys.exit(0)
        errors[label] = f"{type(e).__name__}: {str(e)[:400]}"
print(json.dumps({"errors": errors}))
'''

# bf16 at the benchmark scale: the tuned paths (first autotune config) and the causal split.
HOPPER_ARGS = {
    "cross_entropy": [[[4096, 128256], "bfloat16"], [[4096], "int64"]],
    "matmul": [[[4096, 4096], "bfloat16"], [[4096, 4096], "bfloat16"]],
    "fused_mlp": [[[4096, 4096], "bfloat16"], [[11008, 4096], "bfloat16"], [[11008, 4096], "bfloat16"],
                  [[4096, 11008], "bfloat16"]],
    "flash_attention": [[[4, 32, 4096, 128], "bfloat16"]] * 3 + [True],
    "rotary_embedding": [[[4, 32, 4096, 128], "bfloat16"], [[4096, 128], "bfloat16"], [[4096, 128], "bfloat16"]],
    "layernorm": [[[8192, 8192], "bfloat16"], [[8192], "bfloat16"], [[8192], "bfloat16"]],
    "reduce": [[[65536, 1024], "bfloat16"]],
}


def compile_for_hopper(jobs: list) -> dict:
    """COMPILE_FOR_HOPPER in a process of its own (no interpreter) on `jobs`, each (label, kernel type, template
    params, argument specs: [shape, dtype name] for a tensor, else the value): the errors per label; skips the
    test where this machine's Triton cannot target sm_90."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_HOPPER, json.dumps(jobs)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result["errors"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU run compiles and runs the starters for real")
def test_starters_compile_for_hopper():
    assert compile_for_hopper([(kind, kind, {}, args) for kind, args in HOPPER_ARGS.items()]) == {}


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_the_eager_baseline_computes_what_the_reference_does(spec):
    """Speedups are measured against `spec.eager` (idiomatic PyTorch in the inputs' dtype); it must
    be the same function as the fp32/fp64 reference that judges correctness."""
    gen = torch.Generator().manual_seed(1)
    for dtype in spec.dtypes:
        args = spec.make_inputs(spec.smoke_shape, dtype, "cpu", gen, "normal")
        ref = spec.reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
        got = spec.eager(*args)
        atol, rtol = spec.tolerance(dtype)
        assert got.dtype == spec.reference(*args).dtype and got.shape == ref.shape
        assert torch.allclose(got.double(), ref, atol=atol, rtol=rtol), (spec.name, dtype)


ROTARY_VIEW_SCRIPT = r'''
import importlib.util, sys
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from autokernel.kernels import get_spec

spec = importlib.util.spec_from_file_location("rotary_starter", sys.argv[1])
starter = importlib.util.module_from_spec(spec)
spec.loader.exec_module(starter)
ref = get_spec("rotary_embedding").reference
torch.manual_seed(0)
b, s, h, d = 2, 24, 3, 32
q = torch.randn(b, s, h * d).view(b, s, h, d).transpose(1, 2)  # as attention makes q: [B, H, S, D], not contiguous
cos, sin = torch.randn(s, d), torch.randn(s, d)


class Copies(TorchDispatchMode):
    """Counts copies of q's size (a .contiguous() of it)."""
    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.clone, torch.ops.aten.copy_, torch.ops.aten._to_copy) \
                and isinstance(out, torch.Tensor) and out.numel() == q.numel():
            Copies.n += 1
        return out


with Copies():
    out = starter.kernel_fn(q, cos, sin)
torch.testing.assert_close(out, ref(q, cos, sin), atol=1e-5, rtol=1e-5)
print("layout", "as_eager" if out.stride() == (q * cos).stride() else f"{out.stride()} vs {(q * cos).stride()}")
print("copies", Copies.n)
'''


@pytest.mark.parametrize("source", ["starter", "template"])
def test_the_rotary_kernels_read_a_transposed_q_where_it_is_and_keep_its_layout(source, tmp_path):
    """Attention hands the rotary embedding q and k as transposed views; copying them first (as the
    Llama integration did on the H100: 8 extra reads and writes of 64 MB per forward) is not needed.
    The output keeps q's layout, as eager PyTorch's x * cos + rotate_half(x) * sin does: attention's
    output then comes back in [B, S, H, D] memory and the model's transpose-and-reshape is a view."""
    from autokernel.kernels import get_spec as spec_of
    from autokernel.playbook.templates import rotary_embedding as template

    path = spec_of("rotary_embedding").starters["triton"]
    if source == "template":  # the starter at its defaults; its other tiled kernel: partners gathered, no halves
        path = tmp_path / "rotary_template.py"
        path.write_text(template.render({"split_halves": False}))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, "-c", ROTARY_VIEW_SCRIPT, str(path)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[-4:] == ["layout", "as_eager", "copies", "0"], p.stdout


PATHS_SCRIPT = r'''
import torch
from autokernel.kernels.rotary_embedding import rope_tables, reference as rope_reference
from autokernel.kernels.rotary_embedding import starter_triton as rope
from autokernel.kernels.softmax import starter_triton as softmax

# softmax: narrow rows several per program, one 1-D tile up to 32768 columns, and wider rows in a loop of
# fewer programs than rows (8 under the interpreter) with the write pass walking each row backwards
for rows, cols in ((5, 1000), (3, 20000), (11, 33000), (9, 70000)):
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(rows, cols) * 4).to(dtype)
        torch.testing.assert_close(softmax.kernel_fn(x).float(), torch.softmax(x.float(), -1),
                                   atol=1e-2 if dtype == torch.bfloat16 else 1e-5,
                                   rtol=1e-2 if dtype == torch.bfloat16 else 1e-4)
        print("softmax", rows, cols, dtype, "ok")
# rotary with the GPU's tiles, not the interpreter's: the flat path (2048 elements, a block boundary inside a
# head's rows) for a contiguous x, the tiled one (1024 half-row elements, one head per program) for a
# transposed view of [B, S, H, D] memory; a rotation sign or partner index off by a half shows in both.
rope.SEQ_TILE, rope.HEADS_PER_PROGRAM, rope.FLAT_BLOCK, rope.FLAT_WARPS = 1024, 1, 2048, 8
for b, h, s, d in ((2, 5, 33, 128), (1, 3, 40, 64)):
    cos, sin = rope_tables(s, d, torch.float32, "cpu")
    for x in (torch.randn(b, h, s, d), torch.randn(b, s, h, d).transpose(1, 2)):
        torch.testing.assert_close(rope.kernel_fn(x, cos, sin), rope_reference(x, cos, sin), atol=1e-5, rtol=1e-5)
        print("rotary", b, h, s, d, "contiguous" if x.is_contiguous() else "view", "ok")
'''


def test_starters_row_paths_and_gpu_tiles_compute_the_reference():
    """Each row path of the softmax starter (the wide one loops over rows in a per-SM grid and writes each row
    backwards, so a row skipped or a tile written twice would show) and the rotary starter at the tile it
    uses on a GPU, which the five stages under the interpreter (larger tiles there) never run."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, "-c", PATHS_SCRIPT], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count(" ok") == 12, p.stdout
