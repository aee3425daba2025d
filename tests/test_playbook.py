"""The playbook: tier pages, templates that render real Triton, and the offline agent's walk.

Numerical checks run rendered candidates in a subprocess under the Triton interpreter (it must be
switched on before triton is imported), on small shapes against PyTorch.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from autokernel.engine.agents.base import TIERS, AgentContext, Measurement, Tried
from autokernel.engine.agents.playbook import PlaybookAgent
from autokernel.playbook import tiers
from autokernel.playbook.templates import available, complete, get_template

TARGETS = ("rmsnorm", "softmax", "cross_entropy")
SHAPES = {
    "rmsnorm": {"rows": 8192, "cols": 4096},
    "softmax": {"rows": 16384, "cols": 2048},
    "cross_entropy": {"rows": 8192, "vocab": 32000},
    "layernorm": {"rows": 8192, "cols": 4096},
    "reduce": {"rows": 8192, "cols": 4096},
    "rotary_embedding": {"batch": 2, "heads": 32, "seq": 2048, "head_dim": 128},
    "matmul": {"M": 4096, "N": 4096, "K": 4096},
    "fused_mlp": {"tokens": 4096, "hidden": 2048, "intermediate": 5632},
    "flash_attention": {"batch": 2, "heads": 16, "seq": 2048, "head_dim": 128, "causal": 1},
}


# -- tier pages ---------------------------------------------------------------------------------
def test_six_tier_pages_load_in_order_and_match_the_agent_tiers():
    pages = tiers()
    assert [t.number for t in pages] == [1, 2, 3, 4, 5, 6]
    for page in pages:
        assert page.text.startswith(f"# Tier {page.number}")
        assert "When it pays" in page.text and "Watch out for" in page.text
        assert TIERS[page.number].split()[0].lower() in page.name.lower()


# -- templates ----------------------------------------------------------------------------------
def _defines_kernel_fn(source: str) -> bool:
    tree = ast.parse(source)
    return any(isinstance(n, ast.FunctionDef) and n.name == "kernel_fn" for n in tree.body)


def _single_moves(template):
    for knob in template.SPACE:
        for value in knob.values:
            if value != template.DEFAULTS[knob.name]:
                yield knob, {**template.DEFAULTS, knob.name: value}


@pytest.mark.parametrize("kernel", available())
def test_template_renders_defaults_and_every_single_knob_move(kernel):
    template = get_template(kernel)
    assert template.KERNEL == kernel and template.METRIC in ("GB/s", "TFLOP/s")
    assert set(template.DEFAULTS) == {k.name for k in template.SPACE}
    assert {k.tier for k in template.SPACE} <= set(TIERS)
    base = template.render(template.DEFAULTS)
    assert _defines_kernel_fn(base) and "@triton.jit" in base
    for knob, params in _single_moves(template):
        source = template.render(params)
        assert _defines_kernel_fn(source), (kernel, knob.name, params[knob.name])
        # The knob is a module-level constant, so a move shows up as a changed line of the diff.
        assert f"{knob.constant} = {params[knob.name]!r}" in source


def test_a_one_knob_move_changes_few_lines():
    import difflib

    template = get_template("rmsnorm")
    a = template.render(template.DEFAULTS)
    b = template.render({**template.DEFAULTS, "num_warps": 16})
    changed = [l for l in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
               if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    line = next(l for l in a.splitlines() if l.startswith(f"NUM_WARPS = {template.DEFAULTS['num_warps']!r}  # tier 1"))
    assert changed == ["-" + line, "+" + line.replace(f"= {template.DEFAULTS['num_warps']!r}", "= 16", 1)]


def test_kernel_without_template_is_a_clear_error():
    with pytest.raises(ValueError, match="no template"):
        get_template("conv3d")


CHECK = textwrap.dedent(
    r'''
    import importlib.util, json, os, sys, tempfile, warnings
    os.environ["TRITON_INTERPRET"] = "1"
    warnings.simplefilter("ignore")
    import torch
    from autokernel.playbook.templates import get_template

    def rmsnorm_ref(x, w, eps=1e-6):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    def local_inputs(kernel, shape, dtype, gen, mode):
        rows, cols = shape["rows"], shape["cols"]
        scale = {"normal": 4.0, "large": 1e3, "mixed": 1.0, "constant": 0.0}[mode]
        x = torch.randn(rows, cols, generator=gen) * scale + (1.5 if mode == "constant" else 0.0)
        x = x.to(dtype)
        if kernel == "rmsnorm":
            return (x, torch.randn(cols, generator=gen).to(dtype))
        return (x,)

    LOCAL_REF = {
        "rmsnorm": rmsnorm_ref,
        "softmax": lambda x: torch.softmax(x.float(), -1).to(x.dtype),
    }
    LOCAL_SHAPES = [{"rows": 1, "cols": 1}, {"rows": 5, "cols": 37}, {"rows": 4, "cols": 1500}, {"rows": 3, "cols": 3000}]
    LOCAL_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}

    def cases(kernel, full, shapes=None):
        """(shape, dtype, mode, args, reference, (atol, rtol)): the real spec where it exists; `shapes` given,
        only those, with normal inputs."""
        gen = torch.Generator().manual_seed(0)
        try:
            from autokernel.kernels import get_spec
            spec = get_spec(kernel)
        except ValueError:
            spec = None
        dtypes = (torch.float32, torch.bfloat16)
        if spec is None:
            for shape in LOCAL_SHAPES:
                for dtype in dtypes:
                    for mode in ("normal", "large", "constant"):
                        yield shape, dtype, mode, local_inputs(kernel, shape, dtype, gen, mode), LOCAL_REF[kernel], LOCAL_TOL[dtype]
            return
        if shapes:
            for shape in shapes:
                for dtype in dtypes:
                    yield shape, dtype, "normal", spec.make_inputs(shape, dtype, "cpu", gen, "normal"), spec.reference, spec.tolerance(dtype)
            return
        from autokernel.kernels.spec import noncontiguous_like
        # Every shape in normal inputs; the other regimes on the smoke shape (the interpreter is slow
        # per program, so shapes with hundreds of rows are left to the harness on a GPU).
        shapes = [spec.smoke_shape, *spec.edge_shapes, *(spec.sweep_shapes if full else ())]
        shapes = [s for s in shapes if spec.elements(s) <= 100_000 and max(s.values()) <= 20_000
                  and next(iter(s.values())) <= 256]
        for shape in shapes:
            for dtype in dtypes:
                yield shape, dtype, "normal", spec.make_inputs(shape, dtype, "cpu", gen, "normal"), spec.reference, spec.tolerance(dtype)
        for mode in ("large", "tiny", "mixed", "constant") if full else ():
            for dtype in dtypes:
                args = spec.make_inputs(spec.smoke_shape, dtype, "cpu", gen, mode)
                yield spec.smoke_shape, dtype, mode, args, spec.reference, spec.tolerance(dtype)
        args = list(spec.make_inputs(spec.smoke_shape, torch.float32, "cpu", gen, "normal"))
        for i in spec.data_args:
            args[i] = noncontiguous_like(args[i])
        yield spec.smoke_shape, torch.float32, "non-contiguous", tuple(args), spec.reference, spec.tolerance(torch.float32)

    def close_enough(got, args, reference, atol, rtol):
        """Within the spec's tolerance of the float64 truth, with the slack PyTorch itself needs
        in this dtype (fp32 sums of 1e4-sized values are not exact for anyone)."""
        truth = reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]).double()
        torch_err = (reference(*args).double() - truth).abs().nan_to_num(0.0).max()
        allowed = atol + rtol * truth.abs() + 2 * torch_err
        return bool(((got.double() - truth).abs() <= allowed).all()) or bool(torch.equal(got.double().isnan(), truth.isnan()) and truth.isnan().all())

    results, n = {}, 0
    for name, kernel, variants, full, *shapes in json.loads(sys.argv[1]):  # one process for every job: imports are slow
        template = get_template(kernel)
        failures = results.setdefault(name, [])
        for params in variants:
            n += 1
            path = os.path.join(tempfile.mkdtemp(), "candidate.py")
            with open(path, "w") as f:
                f.write(template.render(params))
            spec_ = importlib.util.spec_from_file_location(f"candidate_{n}", path)
            mod = importlib.util.module_from_spec(spec_)
            spec_.loader.exec_module(mod)
            for shape, dtype, mode, args, reference, (atol, rtol) in cases(kernel, full, *shapes):
                want = reference(*args)
                got = mod.kernel_fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
                if got.shape != want.shape or got.dtype != want.dtype or not close_enough(got, args, reference, atol, rtol):
                    failures.append([params, shape, str(dtype), mode])
                    break
    print(json.dumps(results))
    '''
)


def _run_in_scratch(cmd: list[str], timeout: int) -> subprocess.CompletedProcess:
    """A check script, its temporary files in a folder removed afterwards (it writes one per candidate)."""
    with tempfile.TemporaryDirectory() as scratch:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "TMPDIR": scratch})


def _check_under_interpreter(jobs: list[tuple], timeout: int = 400) -> dict[str, list]:
    """{job name: failures} for jobs (name, kernel, params list, full[, shapes]); `full` adds the sweep shapes
    and the stability regimes to the smoke and edge shapes; `shapes` replaces them all (normal inputs)."""
    out = _run_in_scratch([sys.executable, "-c", CHECK, json.dumps(jobs)], timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# A sample across tiers: each target gets its structural moves (tiling, rows per program,
# persistent grid, online vs two-pass, TMA descriptors, autotune, kernel-specific tricks).
SAMPLES = {
    "rmsnorm": [
        {"max_block_n": 1024, "persistent": 2, "num_stages": 2, "rsqrt": False},
        {"autotune": True, "even_masks": True, "rows_per_program": 4},
        {"tma": True, "rows_per_program": 2, "persistent": 1},
    ],
    "softmax": [
        {"max_block_n": 1024, "online": False, "rows_per_program": 2},
        {"max_block_n": 1024, "persistent": 1, "exp2": False, "reciprocal": False},
        {"tma": True, "autotune": True},
    ],
    "cross_entropy": [
        {"max_block_v": 1024, "online": False, "target_from_tile": True},
        {"max_block_v": 1024, "persistent": 2, "rows_per_program": 4, "exp2": False},
        {"tma": True, "target_from_tile": True},
    ],
}
# The other templates: their defaults and a structural move or two, checked once their spec exists.
MORE_SAMPLES = {
    "layernorm": [{"max_block_n": 1024, "persistent": 1, "rows_per_program": 2}],
    "reduce": [{"split": 4, "max_block_n": 1024, "rows_per_program": 2}],
    "rotary_embedding": [{"split_halves": False, "heads_per_program": 1}],
    "matmul": [{"split_k": 2, "block_m": 32, "block_n": 32, "block_k": 32, "even_k": True}],
    "fused_mlp": [{"block_m": 32, "block_n": 32, "block_k": 32, "h_fp32": True}],
    "flash_attention": [{"block_m": 16, "block_n": 32, "exp2": False, "prescale_q": True}],
}


def _has_spec(kernel: str) -> bool:
    from autokernel.kernels import get_spec

    try:
        get_spec(kernel)
        return True
    except ValueError:
        return False


@pytest.fixture(scope="module")
def interpreter_checks():
    """Every sample below, checked in one interpreter process (its start-up is most of the cost)."""
    jobs = [(k, k, [complete(get_template(k), p) for p in v], False) for k, v in {**SAMPLES, **MORE_SAMPLES}.items()
            if k in SAMPLES or _has_spec(k)]
    # bf16 accumulation of squares is proposed (tier 3) and must be judged, not trusted.
    jobs.append(("rmsnorm-bf16-sums", "rmsnorm", [complete(get_template("rmsnorm"), {"acc_fp32": False})], True))
    return _check_under_interpreter(jobs)


@pytest.mark.parametrize("kernel", TARGETS)
def test_rendered_variants_match_the_reference_under_the_interpreter(kernel, interpreter_checks):
    """A sample across tiers on smoke and edge shapes; the defaults get all five stages below."""
    assert interpreter_checks[kernel] == []


@pytest.mark.parametrize("kernel", sorted(MORE_SAMPLES))
def test_other_templates_match_their_spec_under_the_interpreter(kernel, interpreter_checks):
    if not _has_spec(kernel):
        pytest.skip(f"no spec for {kernel} in this build yet")
    assert interpreter_checks[kernel] == []


def test_a_precision_losing_variant_is_caught_by_the_comparison(interpreter_checks):
    assert interpreter_checks["rmsnorm-bf16-sums"], "summing squares in bf16 should miss the fp32-math reference"


# -- the agent ----------------------------------------------------------------------------------
def _ctx(kernel, parent_id, params, measurement, history, best=None, pool=(), round_no=0, **kw):
    return AgentContext(
        kernel=kernel, backend="triton", device="cuda", device_name="NVIDIA H100", shape=SHAPES[kernel],
        dtype="bf16", parent_id=parent_id, parent_source="", parent_params=params, parent_measurement=measurement,
        best=best or measurement, pool=list(pool), history=history, round=round_no, **kw,
    )


def _simulate(kernel, cost, experiments=100):
    """Drive the agent like the search loop does (two seeds, fake but consistent timings)."""
    agent = PlaybookAgent()
    starter = Measurement("c0", "starter", True, kernel_ms=2.0, fraction_of_ceiling=0.40)
    known = {"c0": starter}
    best, history, n, rnd, seen, tiers_seen = "c0", [], 0, 0, set(), []
    while n < experiments:
        seeds = sorted((m for m in known.values() if m.passed), key=lambda m: m.kernel_ms)[:2]
        queue = []
        for seed in seeds:
            ctx = _ctx(kernel, seed.candidate_id, seed.params, seed, history, best=known[best],
                       pool=[(m.candidate_id, m) for m in seeds], round_no=rnd)
            queue += [(idea, seed) for idea in agent.propose(ctx)]
        rnd += 1
        if not queue:
            break
        this_round = set()
        for idea, seed in queue:
            results = []
            for v in idea.variants:
                key = json.dumps(v.params, sort_keys=True)
                assert key not in seen, f"params already tried in an earlier round: {v.params}"
                if key in this_round:
                    continue  # the loop runs a source once even if two seeds propose it
                this_round.add(key)
                n += 1
                ms = cost(v.params)
                m = Measurement(f"c{n}", v.label, True, kernel_ms=ms, fraction_of_ceiling=0.8 / ms, params=v.params)
                known[m.candidate_id] = m
                results.append(m)
                if ms < known[best].kernel_ms * 0.99:
                    best = m.candidate_id
            if results:
                history.append(Tried(idea.tier, idea.title, idea.hypothesis, seed.candidate_id, results))
                tiers_seen.append(idea.tier)
        seen |= this_round
    return history, known[best], tiers_seen


def _rms_cost(p):
    # 0 is the starter's rule, which at 4096 columns is 8 warps and one row per program.
    ms = {0: 1.0, 1: 3.0, 2: 2.0, 4: 1.3, 8: 1.0, 16: 0.9, 32: 1.1}[p["num_warps"]]
    ms *= {0: 1.0, 1: 1.0, 2: 0.95, 4: 0.97, 8: 1.05}[p["rows_per_program"]]
    return ms * (0.93 if p["persistent"] == 2 else 1.0) * (0.98 if p["tma"] else 1.0)


def test_agent_walks_the_tiers_never_repeats_and_finds_the_better_corner():
    history, best, tiers_seen = _simulate("rmsnorm", _rms_cost)
    assert tiers_seen[0] == 1 and history[0].title.startswith("Move from the starter")
    assert set(tiers_seen) == {1, 2, 3, 4, 5, 6}
    first = {t: tiers_seen.index(t) for t in set(tiers_seen)}
    assert first[1] < first[2] < first[3] and first[3] <= first[4] <= first[5] <= first[6]
    p = best.params
    assert (p["num_warps"], p["rows_per_program"], p["persistent"], p["tma"]) == (16, 2, 2, True)


def test_agent_is_deterministic_and_stops_when_the_space_is_exhausted():
    a, best_a, _ = _simulate("softmax", lambda p: 1.0 + 0.01 * p["num_warps"], experiments=400)
    b, best_b, _ = _simulate("softmax", lambda p: 1.0 + 0.01 * p["num_warps"], experiments=400)
    assert [t.title for t in a] == [t.title for t in b] and best_a.params == best_b.params
    assert len(a) < 400  # the walk ended with [] before the experiment cap


def test_first_idea_moves_from_the_starter_to_the_template():
    ctx = _ctx("cross_entropy", "c0", {}, Measurement("c0", "starter", True, kernel_ms=0.5, fraction_of_ceiling=0.31), [])
    ideas = PlaybookAgent().propose(ctx)
    assert len(ideas) == 1 and ideas[0].tier == 1
    assert "not from the playbook" in ideas[0].hypothesis and "31%" in ideas[0].hypothesis
    assert all(v.params and v.params.keys() == get_template("cross_entropy").DEFAULTS.keys() for v in ideas[0].variants)
    assert len(ideas[0].variants) <= ctx.max_variants


def test_hypotheses_cite_the_parent_measurement_and_shape():
    t = get_template("rmsnorm")
    m = Measurement("c7", "x", True, kernel_ms=0.1234, fraction_of_ceiling=0.71, params=dict(t.DEFAULTS))
    ideas = PlaybookAgent().propose(_ctx("rmsnorm", "c7", dict(t.DEFAULTS), m, []))
    assert 1 <= len(ideas) <= 3
    for idea in ideas:
        assert "71% of copy bandwidth" in idea.hypothesis and "0.1234 ms" in idea.hypothesis
        assert "8192x4096" in idea.hypothesis and "bf16" in idea.hypothesis
        assert 1 <= len(idea.variants) <= 3 and idea.parent_id == "c7"
        for v in idea.variants:
            assert v.params != t.DEFAULTS and _defines_kernel_fn(v.source)
    assert t.DEFAULTS["num_warps"] == 0  # the starter's own rule decides: the hypothesis says so in words
    assert ideas[0].tier == 1 and "with num_warps=the starter's choice:" in ideas[0].hypothesis


def test_no_op_moves_at_the_target_shape_are_skipped():
    """At 2048 columns every tile cap >= 2048 is the same whole-row kernel: not worth an experiment."""
    t = get_template("softmax")
    parent = dict(t.DEFAULTS)  # max_block_n 32768 > 2048: whole row
    m = Measurement("c1", "x", True, kernel_ms=0.1, fraction_of_ceiling=0.8, params=parent)
    ideas = PlaybookAgent().propose(_ctx("softmax", "c1", parent, m, [], max_ideas=12, max_variants=12))
    caps = [v.params["max_block_n"] for i in ideas for v in i.variants
            if v.params["max_block_n"] != parent["max_block_n"]]
    assert caps and all(c < 2048 for c in caps)
    assert not any(i.title.startswith("num_stages") for i in ideas)  # nothing loops, stages do nothing


def test_unknown_kernel_or_backend_is_reported():
    m = Measurement("c0", "s", True, kernel_ms=1.0)
    with pytest.raises(ValueError, match="no template"):
        PlaybookAgent().propose(AgentContext("conv3d", "triton", "cuda", "H100", {}, "bf16", "c0", "", {}, m, m, [], [], 0))
    with pytest.raises(ValueError, match="no moves"):
        PlaybookAgent().propose(dataclasses.replace(_ctx("rmsnorm", "c0", {}, m, []), backend="cuda"))


def test_hint_naming_a_knob_puts_it_first():
    t = get_template("rmsnorm")
    m = Measurement("c1", "x", True, kernel_ms=0.1, fraction_of_ceiling=0.8, params=dict(t.DEFAULTS))
    ideas = PlaybookAgent().propose(_ctx("rmsnorm", "c1", dict(t.DEFAULTS), m, [], hint="try the persistent grid"))
    assert ideas[0].title.startswith("persistent")


def _five_stages(jobs: list[tuple[str, dict]]) -> dict[str, list]:
    """{kernel: [[stage, status, detail]...]}: the harness's five stages on rendered candidates, on the
    CPU interpreter (through the worker once `engine/worker.py` exists, the harness directly until then)."""
    from autokernel.engine.worker import Worker

    verdicts = {}
    worker = Worker(device="cpu")
    scratch = tempfile.TemporaryDirectory()
    try:
        for kernel, params in jobs:
            template = get_template(kernel)
            path = Path(tempfile.mkdtemp(dir=scratch.name)) / "candidate.py"
            path.write_text(template.render(complete(template, params)))
            report = worker.check(str(path), kernel=kernel, backend="triton")
            verdicts[kernel] = [[s.name, s.status, s.detail] for s in report.stages] or [["load", "fail", report.error]]
    finally:
        worker.close()
        scratch.cleanup()
    return verdicts


@pytest.fixture(scope="module")
def five_stage_verdicts():
    return _five_stages([(k, {}) for k in TARGETS if _has_spec(k)])


@pytest.mark.parametrize("kernel", TARGETS)
def test_template_defaults_pass_the_five_stages(kernel, five_stage_verdicts):
    if not _has_spec(kernel):
        pytest.skip(f"no spec for {kernel} in this build yet")
    verdict = five_stage_verdicts[kernel]
    assert [status for _, status, _ in verdict] == ["pass"] * 5, verdict


def test_a_tier_that_stopped_paying_gives_way_and_is_revisited_around_a_new_best():
    t = get_template("rmsnorm")
    base = dict(t.DEFAULTS)
    parent = Measurement("c1", "x", True, kernel_ms=1.0, fraction_of_ceiling=0.7, params=base)
    slower = [Measurement(f"c{i}", "x", True, kernel_ms=1.2, fraction_of_ceiling=0.6, params={**base, "num_warps": w})
              for i, w in ((2, 16), (3, 4))]
    history = [Tried(1, "num_warps", "h", "c1", [slower[0]]), Tried(1, "num_warps", "h", "c1", [slower[1]])]
    ideas = PlaybookAgent().propose(_ctx("rmsnorm", "c1", base, parent, history, best=parent))
    assert ideas[0].tier == 2, [i.title for i in ideas]  # tier 1 missed twice in a row: move on

    # A tier-2 move then paid: around that new best, tier 1 gets one more idea.
    better = Measurement("c4", "x", True, kernel_ms=0.8, fraction_of_ceiling=0.85, params={**base, "rows_per_program": 2})
    history = history + [Tried(2, "rows_per_program", "h", "c1", [better])]
    ideas = PlaybookAgent().propose(_ctx("rmsnorm", "c4", better.params, better, history, best=better,
                                         pool=[("c4", better), ("c1", parent)]))
    revisits = [i for i in ideas if i.tier == 1]
    assert len(revisits) == 1 and "Revisited around the new best" in revisits[0].hypothesis
    assert revisits[0].title.startswith("num_warps") and "85% of copy bandwidth" in revisits[0].hypothesis
    tried = {json.dumps(m.params, sort_keys=True) for tr in history for m in tr.results}
    assert all(json.dumps(v.params, sort_keys=True) not in tried for i in ideas for v in i.variants)


# -- compiled for Hopper without a GPU ------------------------------------------------------------
# The interpreter runs Python, so it cannot see what only the compiler rejects (a name defined inside
# a loop and used after it, a loop Triton cannot warp-specialize): rendered candidates are compiled for
# sm_90 by tests/test_kernel_library.py's `compile_for_hopper`.
# Argument shapes at the bundled Llama example's scale (tensors are allocated, never computed on).
LLAMA_ARGS = {
    "rmsnorm": [[[8192, 4096], "bfloat16"], [[4096], "bfloat16"]],
    "softmax": [[[8192, 4096], "bfloat16"]],
    "cross_entropy": [[[8192, 32000], "bfloat16"], [[8192], "int64"]],
    "layernorm": [[[8192, 4096], "bfloat16"], [[4096], "bfloat16"], [[4096], "bfloat16"]],
    "reduce": [[[8192, 4096], "bfloat16"]],
    "rotary_embedding": [[[2, 32, 2048, 128], "bfloat16"], [[2048, 128], "bfloat16"], [[2048, 128], "bfloat16"]],
    "matmul": [[[4096, 4096], "bfloat16"], [[4096, 4096], "bfloat16"]],
    "fused_mlp": [[[4096, 2048], "bfloat16"], [[5632, 2048], "bfloat16"], [[5632, 2048], "bfloat16"], [[2048, 5632], "bfloat16"]],
    "flash_attention": [[[2, 16, 2048, 128], "bfloat16"]] * 3 + [True],
}
SM90_SAMPLES = {
    "rmsnorm": [{}, {"persistent": 2, "rows_per_program": 2}, {"tma": True}, {"max_block_n": 1024, "num_stages": 3}],
    "softmax": [{}, {"max_block_n": 1024}, {"tma": True, "persistent": 1}],
    "cross_entropy": [{}, {"max_block_v": 4096, "target_from_tile": True}, {"autotune": True}],
    "layernorm": [{}], "reduce": [{"split": 4}], "rotary_embedding": [{}],
    "matmul": [{}, {"tma": True, "warp_specialize": True}], "flash_attention": [{}],
    "fused_mlp": [{}, {"warp_specialize": True}, {"interleaved": False, "block_n": 128}, {"tma": False}, {"h_fp32": True}],
}


def test_rendered_kernels_compile_for_hopper():
    from test_kernel_library import compile_for_hopper

    jobs = [(f"{k} {p}", k, p, LLAMA_ARGS[k]) for k, ps in SM90_SAMPLES.items() for p in ps]
    assert compile_for_hopper(jobs) == {}


# -- cross_entropy's aligned window (odd vocabularies) ---------------------------------------------
# At a vocabulary that is not a multiple of 8 every row starts at an odd address; with ALIGNED_WINDOW
# on, every row but the last is read over its 16-byte-aligned window (as the CUDA starter does).
WINDOW_CHECK = textwrap.dedent(
    r'''
    import importlib.util, json, os, sys, tempfile, warnings
    os.environ["TRITON_INTERPRET"] = "1"
    warnings.simplefilter("ignore")
    import torch
    import torch.nn.functional as F
    from autokernel.kernels import get_spec
    from autokernel.playbook.templates import complete, get_template

    template, spec = get_template("cross_entropy"), get_spec("cross_entropy")

    class Recorder:
        """Stands in for the rendered kernel: notes each launch's VEC, then launches it."""
        def __init__(self, kernel, vecs):
            self.kernel, self.vecs = kernel, vecs
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                self.vecs.append(kwargs.get("VEC", 1))
                return self.kernel[grid](*args, **kwargs)
            return launch

    failures, windowed = [], []
    for n, params in enumerate(json.loads(sys.argv[1])):
        path = os.path.join(tempfile.mkdtemp(), "candidate.py")
        with open(path, "w") as f:
            f.write(template.render(complete(template, params)))
        spec_ = importlib.util.spec_from_file_location(f"window_candidate_{n}", path)
        mod = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(mod)
        vecs = []
        mod._cross_entropy_kernel = Recorder(mod._cross_entropy_kernel, vecs)
        for rows, vocab in ((5, 1001), (3, 4097)):
            for dtype in (torch.float32, torch.bfloat16):
                gen = torch.Generator().manual_seed(rows * vocab)
                x = torch.randn(rows, vocab, generator=gen) * 4
                x[:, :8] += 12  # large at both ends of each row, so a neighbour's element in the sum shows
                x[:, -8:] += 12
                x = x.to(dtype)
                t = torch.randint(0, vocab, (rows,), generator=gen)
                vecs.clear()
                got = mod.kernel_fn(x, t)
                truth = F.cross_entropy(x.double(), t)
                atol, rtol = spec.tolerance(dtype)
                case = [params, rows, vocab, str(dtype)]
                if got.dtype != torch.float32 or not abs(got.double() - truth) <= atol + rtol * abs(truth):
                    failures.append(case + [got.item(), truth.item()])
                if any(v > 1 for v in vecs):
                    windowed.append(case)
    print(json.dumps({"failures": failures, "windowed": windowed}))
    '''
)


def test_aligned_window_variants_match_torch_at_odd_vocabularies():
    """Every combination of the window with rows per program, the persistent grid, the target read from
    the tile, and the whole-row / online / two-pass reductions, against float64 torch."""
    combos = [{"aligned_window": True, "rows_per_program": r, "persistent": pe, "target_from_tile": tf,
               "online": online, "max_block_v": cap}
              for r in (1, 2) for pe in (0, 2) for tf in (False, True)
              for online, cap in ((True, 32768), (True, 1024), (False, 1024))]
    combos += [{"aligned_window": True, "tma": True, "rows_per_program": 2},
               {"aligned_window": True, "autotune": True, "max_block_v": 1024}]
    out = _run_in_scratch([sys.executable, "-c", WINDOW_CHECK, json.dumps(combos)], 400)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failures"] == []
    # Each combination read through the window in every case (the last row alone is read plain).
    assert len(result["windowed"]) == 4 * len(combos)


def test_aligned_window_is_a_no_op_at_an_aligned_or_unknown_vocabulary():
    t = get_template("cross_entropy")
    on, off = {**t.DEFAULTS, "aligned_window": True}, dict(t.DEFAULTS)
    assert off["aligned_window"] is False  # as the Triton starter: the window measured slower on the H100
    for shape, dtype in (({"rows": 8192, "vocab": 32000}, "bf16"), ({}, "bf16"), ({"rows": 8, "vocab": 1004}, "fp32"),
                         ({"rows": 1, "vocab": 50257}, "bf16")):
        assert t.effective(on, shape, dtype) == t.effective(off, shape, dtype), (shape, dtype)
        assert t.effective(on, shape, dtype)["aligned_window"] is None
    odd = {"rows": 8192, "vocab": 50257}
    assert t.effective(on, odd, "bf16")["aligned_window"] is True
    assert t.effective(off, odd, "bf16")["aligned_window"] is False
    # The window is the starter's code behind VEC > 1: the move changes only the ALIGNED_WINDOW constant.
    assert t.render(on) == t.render(off).replace("ALIGNED_WINDOW = False", "ALIGNED_WINDOW = True") != t.render(off)


def test_agent_proposes_the_aligned_window_only_at_an_odd_vocabulary():
    t = get_template("cross_entropy")
    parent = {**t.DEFAULTS, "aligned_window": True}
    m = Measurement("c1", "x", True, kernel_ms=0.5, fraction_of_ceiling=0.6, params=parent)

    def titles(vocab, dtype="bf16"):
        ctx = dataclasses.replace(_ctx("cross_entropy", "c1", parent, m, [], max_ideas=20, max_variants=12),
                                  shape={"rows": 8192, "vocab": vocab}, dtype=dtype)
        ideas = PlaybookAgent().propose(ctx)
        return ideas, [i.title for i in ideas]

    ideas, names = titles(50257)
    assert "aligned_window: True -> False" in names
    idea = ideas[names.index("aligned_window: True -> False")]
    assert idea.tier == 2 and "rows of 50257 logits start at odd addresses" in idea.hypothesis
    assert [v.params["aligned_window"] for v in idea.variants] == [False]
    for vocab, dtype in ((32000, "bf16"), (128256, "bf16"), (1004, "fp32")):
        assert not any(n.startswith("aligned_window") for n in titles(vocab, dtype)[1]), vocab
    # From a parent without the window, turning it on reads as the 16-byte-vector idea.
    off = {**parent, "aligned_window": False}
    m_off = Measurement("c2", "x", True, kernel_ms=0.5, fraction_of_ceiling=0.6, params=off)
    ctx = dataclasses.replace(_ctx("cross_entropy", "c2", off, m_off, [], max_ideas=20),
                              shape={"rows": 8192, "vocab": 50257})
    on_idea = next(i for i in PlaybookAgent().propose(ctx) if i.title.startswith("aligned_window"))
    assert on_idea.title == "aligned_window: False -> True" and "16-byte vector" in on_idea.hypothesis
    # Entering the template from the starter (no window) at an odd vocabulary: the first guesses have none either.
    ctx = dataclasses.replace(_ctx("cross_entropy", "c0", {}, m, []), shape={"rows": 8192, "vocab": 50257})
    assert not any(v.params["aligned_window"] for v in PlaybookAgent().propose(ctx)[0].variants)


def test_a_rendered_candidate_with_the_aligned_window_passes_the_check_cli(tmp_path):
    t = get_template("cross_entropy")
    path = tmp_path / "candidate.py"
    path.write_text(t.render(complete(t, {"aligned_window": True, "rows_per_program": 2, "target_from_tile": True})))
    out = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "check", str(path), "--kernel", "cross_entropy",
                          "--device", "cpu", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["passed"] is True and [s["status"] for s in doc["stages"]] == ["pass"] * 5, doc


# -- a whole problem: moves over an Inductor seed's launch constants --------------------------------
SEED = '''K0_XBLOCK = 1
K0_WARPS = 2
K0_STAGES = 1

@triton.jit
def triton_per_fused_cumsum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):
    xnumel = 4
    r0_numel = 128
    R0_BLOCK: tl.constexpr = 128
    xoffset = tl.program_id(0) * XBLOCK

K1_YBLOCK = 16
K1_XBLOCK = 32
K1_R0_BLOCK = 16
K1_WARPS = 4
K1_STAGES = 2

@triton.jit
def triton_tem_fused_mm_1(in_ptr0, in_ptr1, out_ptr0, ynumel, xnumel, r0_numel, YBLOCK: tl.constexpr,
                          XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    ynumel = 64
    xnumel = 64
    r0_numel = 64
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        acc += tl.dot(a, b)


class ModelNew(Model):
    def forward(self, *inputs):
        pass
'''


def _seed_ctx(source, history=(), measured=None, device="cpu"):
    from autokernel.engine.agents.seed_moves import seed_knobs

    parent = Measurement("problem-0001", "Inductor seed", True, kernel_ms=measured, params=seed_knobs(source))
    return AgentContext(kernel="problem", backend="triton", device=device, device_name=device, shape={},
                        dtype="fp32", parent_id="problem-0001", parent_source=source,
                        parent_params=seed_knobs(source), parent_measurement=parent, best=parent, pool=[],
                        history=list(history), round=1, max_ideas=9, max_variants=3)


def test_a_seed_gets_halve_and_double_moves_of_its_own_knobs_with_hypotheses():
    from autokernel.engine.agents.seed_moves import seed_knobs

    ideas = PlaybookAgent().propose(_seed_ctx(SEED, measured=2.5, device="cuda"))
    titles = [i.title for i in ideas]
    # blocks before warps before stages, kernels in order; no move past an extent (K0 has 4 rows: XBLOCK <= 4),
    # none below 16 in a tl.dot kernel, no stages for the kernel without a loop
    assert titles == ["K0_XBLOCK: 1 -> 2", "K1_R0_BLOCK: 16 -> 32", "K1_XBLOCK: 32 -> 64 / 16",
                      "K1_YBLOCK: 16 -> 32", "K0_WARPS: 2 -> 4 / 1", "K1_WARPS: 4 -> 8 / 2", "K1_STAGES: 2 -> 3 / 1"]
    for idea in ideas:
        assert idea.tier == 1 and "2.5 ms" in idea.hypothesis and idea.parent_id == "problem-0001"
        for v in idea.variants:  # each variant is the parent with exactly one constant changed
            changed = {k for k, val in v.params.items() if seed_knobs(SEED)[k] != val}
            assert len(changed) == 1 and seed_knobs(v.source) == v.params
            assert [ln for ln in v.source.splitlines() if ln not in SEED.splitlines()] == [
                f"{changed.pop()} = {v.label.split('=')[1]}"]
    assert "twice as many" in ideas[2].hypothesis or "half as many" in ideas[2].hypothesis


def test_seed_moves_never_repeat_and_end_when_every_move_was_tried():
    agent = PlaybookAgent()
    history = []
    for _ in range(20):
        ideas = agent.propose(_seed_ctx(SEED, history, measured=1.0))
        if not ideas:
            break
        tried = [Tried(i.tier, i.title, i.hypothesis, i.parent_id,
                       [Measurement(f"c{len(history)}-{j}", v.label, True, kernel_ms=1.0, params=v.params)
                        for j, v in enumerate(i.variants)]) for i in ideas]
        history += tried
    assert not agent.propose(_seed_ctx(SEED, history, measured=1.0))
    labels = [m.label for t in history for m in t.results]
    assert len(labels) == len(set(labels)) == 11  # 1 + 1 + 2 + 1 block moves, 2 + 2 warps, 2 stages
    assert agent.propose(_seed_ctx("class ModelNew(Model):\n    pass\n")) == []  # not a seed: no knobs


def test_a_knob_the_starter_decides_reads_as_the_starters_choice_not_its_zero():
    """A knob whose starter value is 0 or None lets the starter's code decide (by shape or path): the idea
    must say so, never "1 warps instead of 0" or "block_m: None -> 32"."""
    for kernel in ("rmsnorm", "matmul", "softmax"):
        t = get_template(kernel)
        ideas = PlaybookAgent().propose(_ctx(kernel, "c1", dict(t.DEFAULTS), None, []))
        assert ideas, kernel
        for idea in ideas:
            knob = idea.title.split(":")[0]
            if t.DEFAULTS.get(knob) in (0, None) and not isinstance(t.DEFAULTS.get(knob), bool):
                assert idea.title.startswith(f"{knob}: the starter's choice -> "), idea.title
                assert " instead of 0 " not in idea.hypothesis and "instead of None" not in idea.hypothesis, idea.hypothesis
                assert f"{knob}=the starter's choice" in idea.hypothesis, idea.hypothesis
