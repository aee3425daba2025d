"""An Inductor seed lists the heuristic's other launch configs, and the playbook tries them before single-knob
moves: Inductor times those configs on a GPU and keeps the fastest, while the seed starts from the first."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from autokernel.engine.agents.base import AgentContext, Measurement, Tried
from autokernel.engine.agents.playbook import PlaybookAgent
from autokernel.engine.agents.seed_moves import other_configs, seed_knobs

from problem_support import inductor_seeds

SEED = """K0_XBLOCK = 1
K0_R0_BLOCK = 8192
K0_WARPS = 16
K0_STAGES = 1
K0_OTHER_CONFIGS = [{'XBLOCK': 1, 'R0_BLOCK': 2048, 'WARPS': 16, 'STAGES': 1}, {'XBLOCK': 2, 'R0_BLOCK': 1024, 'WARPS': 8, 'STAGES': 1}]

@triton.jit
def triton_red_fused_log_softmax_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    xnumel = 64
    r0_numel = 8192
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        pass


class ModelNew(Model):
    def forward(self, *inputs):
        pass
"""


def _ctx(source, history=()):
    parent = Measurement("problem-0001", "Inductor seed", True, kernel_ms=8.8, params=seed_knobs(source))
    return AgentContext(kernel="problem", backend="triton", device="cuda", device_name="H100", shape={},
                        dtype="fp32", parent_id="problem-0001", parent_source=source, parent_params=seed_knobs(source),
                        parent_measurement=parent, best=parent, pool=[], history=list(history), round=1,
                        max_ideas=9, max_variants=3)


def test_the_other_configs_come_first_each_a_whole_config_of_the_kernel():
    ideas = PlaybookAgent().propose(_ctx(SEED))
    first = ideas[0]
    assert first.title == "K0: Inductor's other launch configs (2)"
    assert "times them all and keeps the fastest" in first.hypothesis and "8.8 ms" in first.hypothesis
    assert [v.params for v in first.variants] == [
        {"K0_XBLOCK": 1, "K0_R0_BLOCK": 2048, "K0_WARPS": 16, "K0_STAGES": 1},
        {"K0_XBLOCK": 2, "K0_R0_BLOCK": 1024, "K0_WARPS": 8, "K0_STAGES": 1}]
    for v in first.variants:  # the file says what its params say
        assert seed_knobs(v.source) == v.params
    assert first.variants[0].label == "K0_R0_BLOCK=2048"
    assert all("OTHER_CONFIGS" not in i.title for i in ideas[1:])  # then the single-knob moves


def test_tried_configs_are_not_proposed_again():
    ideas = PlaybookAgent().propose(_ctx(SEED))
    done = [Tried(1, ideas[0].title, ideas[0].hypothesis, "problem-0001",
                  [Measurement(f"c{j}", v.label, True, kernel_ms=9.0, params=v.params)
                   for j, v in enumerate(ideas[0].variants)])]
    again = PlaybookAgent().propose(_ctx(SEED, done))
    assert again and not any("other launch configs" in i.title for i in again)


def test_a_listing_that_names_unknown_constants_or_is_not_a_literal_is_ignored():
    assert other_configs(SEED.replace("'WARPS'", "'LANES'", 1)) == {0: [
        {"K0_XBLOCK": 2, "K0_R0_BLOCK": 1024, "K0_WARPS": 8, "K0_STAGES": 1}]}
    assert other_configs(SEED.replace("[{'XBLOCK'", "make([{'XBLOCK'")) == {}


def _log_softmax_problem(folder, draw: str):
    """A KernelBench-form log-softmax over dim 1 whose get_inputs() returns [`draw`]."""
    problem = folder / "log_softmax.py"
    problem.write_text(textwrap.dedent(f"""
        import torch


        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.log_softmax(x, dim=1)


        def get_inputs():
            return [{draw}]


        def get_init_inputs():
            return []
    """))
    return problem


def test_a_real_seed_lists_the_heuristics_other_configs(tmp_path):
    problem = _log_softmax_problem(tmp_path, "torch.rand(16, 8192)")
    seed = tmp_path / "seed.py"
    inductor_seeds([problem], seed)
    source = seed.read_text()
    knobs, others = seed_knobs(source), other_configs(source)
    assert others, "a reduction this wide has more than one heuristic config"
    for index, configs in others.items():
        mine = {k: v for k, v in knobs.items() if k.startswith(f"K{index}_")}
        assert all(set(c) == set(mine) and c != mine for c in configs)
    compile(source, "seed", "exec")


def test_a_softmax_seed_reads_each_row_twice_as_torch_compile_on_a_gpu_does(tmp_path):
    """Inductor fuses a softmax's max and sum into one pass (online softmax) only for GPU devices; the seed
    lifts that gate, so a row too wide for one block is read twice (max and sum together, then the output),
    not three times, and the seed still computes the problem under the interpreter (its helpers' libdevice
    calls too)."""
    import os
    import re

    problem = _log_softmax_problem(tmp_path, "torch.randn(2, 1025) * 4")
    seed = tmp_path / "seed.py"
    inductor_seeds([problem], seed)
    source = seed.read_text()
    assert "triton_helpers.online_softmax_" in source
    assert len(re.findall(r"^\s+for r0_offset in tl\.range\(", source, re.M)) == 2
    compare = textwrap.dedent(f"""
        import importlib.util, torch
        spec = importlib.util.spec_from_file_location("seed", {str(seed)!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        x = torch.randn(2, 1025) * 4
        x[1, 5] = float("inf")  # the one-pass max and sum must still give what torch gives
        print(torch.allclose(module.ModelNew()(x), module.Model()(x), atol=1e-5, rtol=1e-5, equal_nan=True))
    """)
    ran = subprocess.run([sys.executable, "-c", compare], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert ran.stdout.strip().splitlines()[-1:] == ["True"], ran.stderr[-2000:]


def test_a_seed_that_returns_a_view_of_its_buffer_runs(tmp_path):
    """Inductor hands a pooled result back as a view of its buffer (`reinterpret_tensor` in the return and in
    kernel arguments); the seed must make that view itself, not name Inductor's helper."""
    import os

    problem = tmp_path / "avg_pool.py"
    problem.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.pool = nn.AvgPool1d(kernel_size=4, stride=2, padding=1)

            def forward(self, x):
                return self.pool(x)


        def get_inputs():
            return [torch.randn(4, 8, 64)]


        def get_init_inputs():
            return []
    """))
    seed = tmp_path / "seed.py"
    inductor_seeds([problem], seed)
    assert "reinterpret_tensor" not in seed.read_text()
    compare = textwrap.dedent(f"""
        import importlib.util, torch
        spec = importlib.util.spec_from_file_location("seed", {str(seed)!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        x = torch.randn(4, 8, 64)
        print(torch.allclose(module.ModelNew()(x), module.Model()(x), atol=1e-5, rtol=1e-5))
    """)
    ran = subprocess.run([sys.executable, "-c", compare], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert ran.stdout.strip().splitlines()[-1:] == ["True"], ran.stderr[-2000:]
