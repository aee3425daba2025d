"""An Inductor seed autotuned over the launch configs Inductor's heuristic lists (engine/seed_autotune.py), and
the playbook's move that proposes it first: torch.compile times those configs on a GPU, the seed starts from
the first, and a KernelBench problem gets too few experiments to try them one by one."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autokernel.engine.agents.base import AgentContext, Measurement, Tried
from autokernel.engine.agents.playbook import PlaybookAgent
from autokernel.engine.agents.seed_moves import other_configs, seed_knobs
from autokernel.engine.seed_autotune import autotune_seed, autotuned_kernels
from autokernel.engine.static_check import static_problems
from autokernel.engine.worker import Worker

from problem_support import inductor_seeds

PROBLEMS = Path(__file__).parent / "kernelbench_problems"
LOG_SOFTMAX = PROBLEMS / "level1" / "5_log_softmax.py"
CONV_BIAS_RELU = PROBLEMS / "level2" / "6_conv_bias_relu.py"  # its Triton kernel adds the bias in place
INDEX_ADD = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.randint(0, 32, (256,)))

    def forward(self, x):
        return torch.zeros(32, x.shape[1], dtype=x.dtype, device=x.device).index_add(0, self.index, x)


def get_inputs():
    return [torch.randn(256, 64)]


def get_init_inputs():
    return []
'''  # Inductor fills the output with zeros, then accumulates into it with tl.atomic_add


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """{name: (problem, its seed's source)}, generated once: log_softmax, conv_bias_relu, index_add."""
    folder = tmp_path_factory.mktemp("seeds")
    index_add = folder / "index_add.py"
    index_add.write_text(INDEX_ADD)
    problems = {"log_softmax": LOG_SOFTMAX, "conv_bias_relu": CONV_BIAS_RELU, "index_add": index_add}
    verdicts = inductor_seeds(list(problems.values()), folder / "out")
    return {name: (problem, Path(v["seed"]).read_text()) for (name, problem), v in zip(problems.items(), verdicts)}


def _kernel(tree: ast.Module, index: int) -> ast.FunctionDef:
    """The one jit function whose decorators name kernel `index`'s constants."""
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)
                   and any(f"K{index}_" in ast.unparse(d) for d in n.decorator_list)]
    return function


def _decorator(function: ast.FunctionDef) -> dict:
    """The keywords of the function's `@triton.autotune(...)`, as source text."""
    deco = function.decorator_list[0]
    assert ast.unparse(deco.func) == "triton.autotune" and ast.unparse(function.decorator_list[1]) == "triton.jit"
    return {k.arg: ast.unparse(k.value) for k in deco.keywords}


@pytest.mark.parametrize("name", ["log_softmax", "conv_bias_relu", "index_add"])
def test_each_listed_kernel_is_autotuned_from_its_constants_first_and_launched_without_them(seeds, name):
    _, source = seeds[name]
    listed = other_configs(source)
    assert listed, "each of these seeds lists other configs"
    out = autotune_seed(source)
    assert out.kernels == sorted(listed) and autotuned_kernels(out.source) == set(listed)
    tree = ast.parse(out.source)  # it parses
    knobs = seed_knobs(out.source)
    assert knobs == seed_knobs(source)  # the constants stay: the first config is theirs
    for index in out.kernels:
        function = _kernel(tree, index)
        mine = [k[len(f"K{index}_"):] for k in knobs if k.startswith(f"K{index}_")]
        first = "{" + ", ".join(f"'{k}': K{index}_{k}" for k in mine) + "}"
        deco = _decorator(function)
        assert deco["configs"] == f"_launch_configs({first}, K{index}_OTHER_CONFIGS)"
        extents = [a.arg for a in function.args.args if a.arg.endswith("numel")]
        assert deco["key"] == repr(extents)
        launches = [ln.strip() for ln in out.source.splitlines() if ln.strip().startswith(f"{function.name}[")]
        assert launches
        for line in launches:  # the autotuner passes the config: the launch names no constant of the kernel
            assert line.startswith(f"{function.name}[lambda meta: ") and f"K{index}_" not in line
            assert "num_warps" not in line and "num_stages" not in line and "BLOCK=" not in line
    assert static_problems(out.source) == []  # KernelBench's static rules (no try, no pass, ...) still hold
    again = autotune_seed(out.source)
    assert again.kernels == [] and again.source == out.source


def test_what_a_run_changes_in_place_is_restored_between_the_autotuners_runs(seeds):
    restored = {}
    for name in ("log_softmax", "conv_bias_relu", "index_add"):
        tree = ast.parse(autotune_seed(seeds[name][1]).source)
        for index in other_configs(seeds[name][1]):
            function = _kernel(tree, index)
            restored[(name, function.name.split("_")[-2])] = _decorator(function).get("restore_value")
    assert restored[("conv_bias_relu", "view")] == "['in_out_ptr0']"  # adds both biases to the conv's output in place
    assert restored[("index_add", "put")] == "['out_ptr0']"  # tl.atomic_add into the zeros (not the index it read)
    assert restored[("index_add", "full")] is None  # the zero fill writes the same every run
    assert restored[("log_softmax", "online")] is None


RUN = '''
import importlib.util, json, sys, torch
from triton.runtime import Autotuner

path, timed = sys.argv[1], sys.argv[2] == "timed"
source = open(path).read()
if timed:  # what a GPU does: every listed config; the interpreter has no clock, so the benchmark is a stand-in
    source = source.replace('TIME_LAUNCH_CONFIGS = _os.environ.get("TRITON_INTERPRET") != "1"',
                            "TIME_LAUNCH_CONFIGS = True")
    path = path[:-3] + "_timed.py"
    open(path, "w").write(source)
spec = importlib.util.spec_from_file_location("seed", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
runs = []


def benchmark(kernel_call, quantiles):
    for _ in range(3):  # as do_bench does: the kernel, several times over the same arguments
        kernel_call()
    runs.append(3)
    return [float(len(runs))] * 3


configs = {}
for name, value in vars(module).items():
    if isinstance(value, Autotuner):
        value.do_bench = benchmark
        configs[name] = [[c.kwargs, c.num_warps, c.num_stages] for c in value.configs]
init = module.get_init_inputs()
torch.manual_seed(0)
model = module.Model(*init)
torch.manual_seed(0)
new = module.ModelNew(*init)
x = module.get_inputs()
with torch.no_grad():
    same = torch.allclose(new(*x), model(*x), atol=1e-5, rtol=1e-5)
print(json.dumps({"configs": configs, "same": bool(same), "runs": sum(runs)}))
'''


def _run(path: Path, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", RUN, str(path), mode], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["conv_bias_relu", "index_add"])
def test_the_autotuned_seed_computes_the_problem_however_many_times_the_autotuner_runs_a_kernel(
        seeds, name, tmp_path):
    _, source = seeds[name]
    out = autotune_seed(source)
    path = tmp_path / "autotuned.py"
    path.write_text(out.source)

    alone = _run(path, "interpreted")  # the interpreter: the first config alone, which is the constants'
    knobs = seed_knobs(source)
    indices = {m.group(1): m.group(2) for m in re.finditer(r"^\s+(\w+)\[.*\bnum_warps=K(\d+)_WARPS", source, re.M)}
    assert sorted(alone["configs"]) == sorted(indices)
    for kernel, configs in alone["configs"].items():
        prefix = f"K{indices[kernel]}_"
        mine = {k[len(prefix):]: v for k, v in knobs.items() if k.startswith(prefix)}
        assert configs == [[{k: v for k, v in mine.items() if k not in ("WARPS", "STAGES")}, mine["WARPS"],
                            mine["STAGES"]]]
    assert alone["same"] and alone["runs"] == 0

    timed = _run(path, "timed")  # every listed config benchmarked, each run three times
    assert all(len(c) == 2 for c in timed["configs"].values()) and timed["runs"] > 0
    assert timed["same"]

    careless = tmp_path / "careless.py"  # the same without restore_value: the repeated runs show in the result
    careless.write_text(re.sub(r", restore_value=\[[^\]]*\]", "", out.source))
    assert not _run(careless, "timed")["same"]


def test_the_autotuned_seed_passes_the_worker_check(seeds, tmp_path):
    problem, source = seeds["conv_bias_relu"]
    path = tmp_path / "autotuned.py"
    path.write_text(autotune_seed(source).source)
    with Worker(device="cpu") as w:
        report = w.check(str(path), kernel="problem", problem=str(problem), size="small")
    assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]


GRID_SEED = '''
K0_YBLOCK = 32
K0_XBLOCK = 32
K0_WARPS = 4
K0_STAGES = 1
K0_OTHER_CONFIGS = [{'YBLOCK': 64, 'XBLOCK': 16, 'WARPS': 8, 'STAGES': 1}]

@triton.jit
def triton_poi_fused_clone_0(in_ptr0, out_ptr0, ynumel, xnumel, YBLOCK: tl.constexpr, XBLOCK: tl.constexpr):
    ynumel = 524288
    xnumel = 64
    tl.store(out_ptr0 + tl.arange(0, XBLOCK), tl.load(in_ptr0 + tl.arange(0, XBLOCK)))


class ModelNew(Model):
    def forward(self, *inputs):
        arg0_1 = inputs[0]
        buf0 = torch.empty_strided((2, 262144, 64), (16777216, 64, 1), dtype=torch.float32, device=arg0_1.device)
        ynumel, xnumel = 524288, 64
        y_grid_raw_ = -((ynumel) // -(K0_YBLOCK))
        y_grid_div_ = -((y_grid_raw_) // -(65535))
        triton_poi_fused_clone_0[(-((xnumel) // -(K0_XBLOCK)), (0 if y_grid_div_ == 0 else -((y_grid_raw_) // -(y_grid_div_))), y_grid_div_)](arg0_1, buf0, ynumel, xnumel, YBLOCK=K0_YBLOCK, XBLOCK=K0_XBLOCK, num_warps=K0_WARPS, num_stages=K0_STAGES)
        return buf0
'''  # an Inductor seed's launch whose grid computes temporaries first (Grid2DWithYZOverflow)


def test_a_grid_that_computes_temporaries_first_becomes_a_function_of_the_config():
    out = autotune_seed(GRID_SEED)
    assert out.kernels == [0]
    forward = out.source.split("def forward(self, *inputs):")[1]
    assert "y_grid_raw_" not in forward.split("def _k0_grid(meta):")[0]  # moved into the grid function
    assert re.search(r"^\s+triton_poi_fused_clone_0\[_k0_grid\]\(arg0_1, buf0, ynumel, xnumel\)$", forward, re.M)
    body = textwrap.dedent(forward.split("ynumel, xnumel = 524288, 64\n")[1].split("\n        triton_")[0])
    scope = {"ynumel": 524288, "xnumel": 64}
    exec(body, scope)  # noqa: S102 (the grid function the transform wrote)
    seed_lines = [ln.strip() for ln in GRID_SEED.splitlines() if ln.strip().startswith(("y_grid_", "triton_poi"))]
    grid = ast.unparse(ast.parse(seed_lines[-1]).body[0].value.func.slice)
    for y, x in ((32, 32), (64, 16)):  # the grid the seed launched with those constants, and the function's
        original = {**scope, "K0_YBLOCK": y, "K0_XBLOCK": x}
        exec("\n".join([*seed_lines[:-1], f"grid = {grid}"]), original)  # noqa: S102
        assert scope["_k0_grid"]({"YBLOCK": y, "XBLOCK": x}) == original["grid"]


def test_a_kernel_whose_grid_does_not_follow_its_block_size_is_left_as_it_was():
    fixed = GRID_SEED.replace("-((xnumel) // -(K0_XBLOCK))", "-((xnumel) // -(32))")
    assert autotune_seed(fixed).kernels == [] and autotune_seed(fixed).source == fixed
    unnamed = GRID_SEED.replace("'WARPS': 8", "'LANES': 8")  # a config of constants the launch does not pass
    assert autotune_seed(unnamed).kernels == []


def _ctx(source: str, history=(), pool=()) -> AgentContext:
    parent = Measurement("problem-0001", "Inductor seed", True, kernel_ms=3.2, params=seed_knobs(source))
    return AgentContext(kernel="problem", backend="triton", device="cuda", device_name="H100", shape={},
                        dtype="fp32", parent_id="problem-0001", parent_source=source, parent_params=seed_knobs(source),
                        parent_measurement=parent, best=parent, pool=list(pool), history=list(history), round=1,
                        max_ideas=9, max_variants=3)


def _tried(idea) -> Tried:
    return Tried(idea.tier, idea.title, idea.hypothesis, idea.parent_id,
                 [Measurement(f"c{j}", v.label, True, kernel_ms=3.5, params=v.params)
                  for j, v in enumerate(idea.variants)])


def test_the_playbook_proposes_the_autotuned_seed_first_and_only_once(seeds):
    _, source = seeds["index_add"]
    ideas = PlaybookAgent().propose(_ctx(source))
    first = ideas[0]
    assert first.title == "Autotune K0, K1 over Inductor's launch configs" and len(first.variants) == 1
    (variant,) = first.variants
    assert variant.source == autotune_seed(source).source
    assert variant.params == {**seed_knobs(source), "autotune": True}
    assert "times them all and keeps the fastest" in first.hypothesis and "3.2 ms" in first.hypothesis
    assert "other launch configs" in ideas[1].title  # then the configs one by one, then single knobs

    again = PlaybookAgent().propose(_ctx(source, history=[_tried(first)]))
    assert again and not any(i.title.startswith("Autotune") for i in again)
    assert [i.title for i in again][: len(ideas) - 1] == [i.title for i in ideas[1:]]


def test_an_autotuned_parent_gets_no_move_of_its_autotuned_kernels_and_keeps_the_others(seeds):
    _, source = seeds["index_add"]
    only_k0 = autotune_seed(re.sub(r"^K1_OTHER_CONFIGS = .+\n", "", source, flags=re.M)).source
    assert autotuned_kernels(only_k0) == {0}
    ideas = PlaybookAgent().propose(_ctx(only_k0))
    assert ideas and not any(i.title.startswith("Autotune") for i in ideas)
    for idea in ideas:
        assert idea.title.startswith("K1_"), idea.title  # K0's configs and knobs are its autotuner's now
        for v in idea.variants:
            assert v.params["autotune"] is True and autotuned_kernels(v.source) == {0}
    everything = autotune_seed(source).source
    assert PlaybookAgent().propose(_ctx(everything)) == []  # every kernel autotuned: nothing left to move
