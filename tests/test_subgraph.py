"""Any operation of a model as a problem (engine/subgraph.py, `autokernel extract`) and the Inductor seed
for a problem (engine/inductor_seed.py): extracted problems compute exactly what their nodes computed in
the model, keep the model's layouts, and the seed Inductor's code becomes passes the real harness."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autokernel.engine import subgraph
from autokernel.engine.cli import main
from autokernel.engine.model_loading import load_model
from autokernel.engine.profiling import ProfileRow

from problem_support import inductor_seeds

MIXED = Path(__file__).parent / "data" / "subgraph" / "mixed_model.py"

# The problems issue 17 names outside the nine kinds, as chains of the mixed model (by their ops).
PROBLEMS = {
    "log_softmax": ["aten::log_softmax"],
    "pooling": ["aten::max_pool2d"],
    "cumsum": ["aten::cumsum"],
    "gemm_gelu": ["aten::linear", "aten::gelu"],
    "conv_bias_relu": ["aten::conv2d", "aten::add", "aten::relu"],
    "norm_dim1": ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"],
    "loss": ["aten::cross_entropy_loss"],
    "scale_mask_softmax": ["aten::mul", "aten::bitwise_not", "aten::masked_fill", "aten::softmax"],
}


@pytest.fixture(scope="module")
def mixed():
    loaded = load_model(MIXED, "cpu")
    cap = subgraph.capture(loaded.model, list(loaded.inputs))
    return loaded, cap, subgraph.candidates(cap)


def by_ops(cands: list, ops: list[str]) -> subgraph.Candidate:
    hits = [c for c in cands if c.ops == ops]
    assert hits, (ops, [c.ops for c in cands])
    return hits[0]


def load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_extracted_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", sorted(PROBLEMS))
def test_an_extracted_problem_computes_what_its_nodes_computed_in_the_model(mixed, kind, tmp_path):
    _, cap, cands = mixed
    cand = by_ops(cands, PROBLEMS[kind])
    ex = subgraph.write_problem(cap, cand, tmp_path / f"{kind}.py", "mixed_model.py")
    module = load(ex.path)
    model = module.Model(*module.get_init_inputs())
    with torch.no_grad():
        out = model(*ex.inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(ex.expected)
    for got, want in zip(outs, ex.expected):
        assert got.dtype == want.dtype and torch.equal(got, want), kind
    drawn, again = module.get_inputs(), module.get_inputs()
    for d, a, captured in zip(drawn, again, ex.inputs):
        assert (d.shape, d.stride(), d.dtype) == (captured.shape, captured.stride(), captured.dtype)
        if d.is_floating_point():
            assert not torch.equal(d, a)  # fresh draws, as the harness needs
        else:
            assert torch.equal(d, captured)  # masks and targets keep the model's values
    # A wrong graph would not read as right: the model's intermediate differs from another input's result.
    if ex.inputs and ex.inputs[0].is_floating_point():
        with torch.no_grad():
            other = model(*[x * 2 + 1 if x.is_floating_point() else x for x in ex.inputs])
        others = other if isinstance(other, tuple) else (other,)
        assert not all(torch.equal(o, w) for o, w in zip(others, ex.expected))


def test_a_transposed_input_keeps_its_strides_and_buffers_their_values(mixed, tmp_path):
    _, cap, cands = mixed
    matmul = by_ops(cands, ["aten::matmul"])
    module = load(subgraph.write_problem(cap, matmul, tmp_path / "mm.py").path)
    a, b = module.get_inputs()
    assert a.stride() == (12, 1) and b.shape == (12, 8) and b.stride() == (1, 12)  # h.t() as the model had it
    softmax = by_ops(cands, PROBLEMS["scale_mask_softmax"])
    ex = subgraph.write_problem(cap, softmax, tmp_path / "sms.py")
    assert ex.saved is not None and ex.saved.exists()
    module = load(ex.path)
    assert torch.equal(module.Model().mask, torch.tril(torch.ones(8, 8, dtype=torch.bool)))


def test_candidates_carry_ops_shapes_and_modules_and_match_profile_rows(mixed):
    _, cap, cands = mixed
    assert cap.how == "torch.export"
    gemm = by_ops(cands, ["aten::linear", "aten::gelu"])
    assert gemm.anchor_shapes == "8x16, 12x16, 12" and gemm.output_shapes == ["8x12"] and gemm.modules == ["proj"]
    assert len({c.name for c in cands}) == len(cands)
    row = ProfileRow(name="aten::conv2d", kind="other", calls=1, shapes=["2x2x8x8, 4x2x3x3"], dtypes=["float32"],
                     self_ms=1, share=0.1, bytes=0, flops=0, floor_ms=0, kernel_speedup=1, max_speedup=1)
    assert subgraph.match_row(cands, row)[0].ops == ["aten::conv2d", "aten::add", "aten::relu"]
    row.shapes = ["9x9"]  # another call of the operator: no node of the model has it
    assert subgraph.match_row(cands, row) == []
    row.name, row.shapes, row.modules = "Linear", [], ["proj"]
    assert subgraph.match_row(cands, row)[0].ops == ["aten::linear", "aten::gelu"]


class Branchy(torch.nn.Module):
    """Data-dependent control flow: torch.export refuses it; make_fx follows the branch the inputs take."""

    def forward(self, x):
        if x.sum() > 0:
            return torch.log_softmax(x * 2.0, dim=0)
        return x


def test_a_model_export_refuses_is_captured_by_make_fx(tmp_path):
    x = torch.randn(4, 6).abs()
    cap = subgraph.capture(Branchy(), [x])
    assert cap.how == "make_fx"
    cand = next(c for c in subgraph.candidates(cap) if "aten::_log_softmax" in c.ops or "aten::log_softmax" in c.ops)
    ex = subgraph.write_problem(cap, cand, tmp_path / "branchy.py")
    with torch.no_grad():
        got = load(ex.path).Model()(*ex.inputs)
    assert torch.equal(got, ex.expected[0])


def test_extract_command(tmp_path, capsys):
    assert main(["extract", str(MIXED), "--list"]) == 0
    listed = capsys.readouterr().out
    assert "conv2d+add+relu" in listed and "aten::conv2d + aten::add + aten::relu" in listed
    out = tmp_path / "p.py"
    assert main(["extract", str(MIXED), "--node", "conv2d+add+relu", "-o", str(out)]) == 0
    assert out.exists() and out.with_suffix(".pt").exists() and "wrote" in capsys.readouterr().err
    assert main(["extract", str(MIXED), "--row", "1", "-o", str(tmp_path / "row.py"), "--json"]) == 0
    chosen = json.loads(capsys.readouterr().out)
    row_op = chosen["chosen_by"].removeprefix("row 1 (").split(",")[0]
    assert chosen["chosen_by"].startswith("row 1 (") and row_op in chosen["candidate"]["ops"]
    bad = {
        ("--node", "nope", "-o", str(out)): "no node or chain named 'nope'",
        ("--row", "0", "-o", str(out)): "--row counts from 1",
        ("--row", "999", "-o", str(out)): "there is no row 999",
        ("--node", "relu"): "-o PROBLEM.py is required",
        ("--node", "relu", "--row", "1", "-o", str(out)): "not both",
        ("--node", "relu", "-o", str(tmp_path / "p.txt")): "must end in .py",
        (): "say what to extract",
    }
    for argv, message in bad.items():
        assert main(["extract", str(MIXED), *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, (argv, err)
    assert main(["extract", str(tmp_path / "missing.py"), "--list"]) == 2


def test_inductor_seeds_of_the_extracted_problems_pass_the_harness(mixed, tmp_path):
    from autokernel.engine.worker import Worker

    _, cap, cands = mixed
    problems = [subgraph.write_problem(cap, by_ops(cands, ops), tmp_path / f"{kind}.py").path
                for kind, ops in sorted(PROBLEMS.items())]
    results = inductor_seeds(problems, tmp_path / "seeds", timeout_s=240)
    # The GEMM's and the conv's problems keep those a library call (their epilogues are Triton); the rest is all Triton.
    externs = {Path(p).stem: r["extern"] for p, r in zip(problems, results)}
    assert all(r["kernels"] for r in results)
    assert externs == {**{k: [] for k in PROBLEMS}, "gemm_gelu": ["addmm"], "conv_bias_relu": ["convolution"]}
    for r in results:
        source = Path(r["seed"]).read_text()
        assert "torch.compile(" not in source and "class ModelNew(" in source and "@triton.jit" in source
    with Worker(device="cpu") as w:
        for problem, r in zip(problems, results):
            report = w.check(r["seed"], kernel="problem", problem=str(problem), size="small")
            assert report.passed, (problem.name, [(s.name, s.status, s.detail) for s in report.stages])
        # The harness is not a rubber stamp: a seed whose kernel computes something else fails it.
        wrong = Path(results[0]["seed"])
        broken = tmp_path / "broken_seed.py"
        broken.write_text(re.sub(r"tl\.store\((\w+) \+ ", r"tl.store(\1 + 1 + ", wrong.read_text(), count=1))
        assert broken.read_text() != wrong.read_text()
        assert not w.check(str(broken), kernel="problem", problem=str(problems[0]), size="small").passed


def test_a_kernelbench_problem_gets_a_seed_that_passes(tmp_path):
    from autokernel.engine.worker import Worker

    problem = Path(__file__).parent / "kernelbench_problems" / "level2" / "3_gemm_relu.py"
    seed = tmp_path / "seed.py"
    (result,) = inductor_seeds([problem], seed, timeout_s=240)
    assert result["extern"] == ["addmm"], result
    assert "torch.addmm(" in seed.read_text()  # the GEMM is cuBLAS's (as torch.compile leaves it), the ReLU Triton
    with Worker(device="cpu") as w:
        report = w.check(str(seed), kernel="problem", problem=str(problem), size="small")
    assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]


def test_a_seed_runs_with_autograd_on_and_one_that_cannot_is_refused(tmp_path):
    """KernelBench times ModelNew with autograd on and a user's script calls it so: Inductor's code writes into
    `out=` buffers, which autograd refuses when a parameter requires grad."""
    from autokernel.engine.worker import Worker

    problem = Path(__file__).parent / "kernelbench_problems" / "level2" / "3_gemm_relu.py"
    seed = tmp_path / "seed.py"
    inductor_seeds([problem], seed, timeout_s=240)
    assert "out=" in seed.read_text()
    # a user's script, in a process of its own: autograd on, parameters requiring grad
    use = (f"import importlib.util, torch\n"
           f"spec = importlib.util.spec_from_file_location('seed_under_test', {str(seed)!r})\n"
           "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
           "model = module.Model(*module.get_init_inputs()); new = module.ModelNew(*module.get_init_inputs())\n"
           "new.load_state_dict(model.state_dict()); x = module.get_inputs()[0]\n"
           "assert torch.is_grad_enabled() and all(p.requires_grad for p in new.parameters())\n"
           "print(bool(torch.allclose(new(x), model(x), atol=1e-4, rtol=1e-4)))\n")
    done = subprocess.run([sys.executable, "-c", use], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TRITON_INTERPRET="1"))
    assert done.returncode == 0 and done.stdout.split()[-1] == "True", done.stderr[-3000:]

    without = tmp_path / "seed_without_no_grad.py"
    without.write_text(seed.read_text().replace("    @torch.no_grad()", "", 1))
    assert without.read_text() != seed.read_text()
    with Worker(device="cpu") as w:
        report = w.check(str(without), kernel="problem", problem=str(problem), size="small")
    assert not report.passed
    smoke = next(s for s in report.stages if s.name == "smoke")
    assert "fails with autograd on" in smoke.detail and "out=" in smoke.detail, smoke.detail
    # the final KernelBench check calls ModelNew so too: such a file is no solution
    from autokernel.engine.integrate import integrate_session_kernels

    kept = [{"kind": "problem", "candidate_id": "problem-0001", "source": without.read_text(), "dtype": "fp32"}]
    check = integrate_session_kernels(str(problem), "cpu", kept, tmp_path / "kb", mode="kernelbench", timeout_s=240)
    assert not check.correct and "(with autograd on)" in check.detail, check.detail


class TwoBlocks(torch.nn.Module):
    """The same GELU * scale + cumsum chain twice, each block with its own scale, then once at another width."""

    def __init__(self):
        super().__init__()
        self.scales = torch.nn.ParameterList([torch.nn.Parameter(torch.rand(8) + 0.5) for _ in range(2)])
        self.wide = torch.nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        for scale in self.scales:
            x = torch.cumsum(torch.nn.functional.gelu(x) * scale, dim=-1).flip(-1)  # flip: no chain runs on
        return torch.cumsum(torch.nn.functional.gelu(torch.cat([x, x], -1)) * self.wide, dim=-1)


def _subgraph_kernel(tmp_path, model, x, body: str):
    """The kernel_fn of the first block's chain, its ModelNew written as `body` (PyTorch: the routing is tested)."""
    cap = subgraph.capture(model, [x])
    cand = next(c for c in subgraph.candidates(cap) if c.ops == ["aten::gelu", "aten::mul", "aten::cumsum"])
    ex = subgraph.write_problem(cap, cand, tmp_path / "chain.py")
    path = tmp_path / "chain_kernel.py"
    path.write_text(ex.source + "\n\nclass ModelNew(Model):\n    def forward(self, *inputs):\n" + body)
    return load(path).kernel_fn


@pytest.mark.parametrize("body, used", [("        return super().forward(*inputs)\n", True),
                                        ("        return super().forward(*inputs) + 1\n", False)])
def test_a_subgraph_kernel_goes_where_its_nodes_are_and_only_where_it_agrees(tmp_path, body, used):
    from autokernel.engine import kernel_patch

    torch.manual_seed(0)
    model, x = TwoBlocks().eval(), torch.randn(4, 8)
    fn = _subgraph_kernel(tmp_path, model, x, body)
    with torch.no_grad():
        want = model(x)
        stats = kernel_patch.patch(model, {"sub_chain": kernel_patch.KernelEntry("sub_chain", fn)})
        got, again = model(x), model(x)
    assert torch.equal(got, want) and torch.equal(again, want)
    # Both blocks (each with its own scale, read from the live model), never the wider chain.
    if used:
        assert stats.calls["sub_chain"] == 4 and not stats.mismatches["sub_chain"]
    else:
        assert stats.calls["sub_chain"] == 0 and len(stats.mismatches["sub_chain"]) == 2
