"""Checks of a kernel type's one Triton implementation beside tests/template_is_starter.py, shared by
tests/test_one_impl_softmax.py and tests/test_one_impl_cross_entropy.py: knob moves run under the interpreter
on shapes that reach every path of the starter, against the spec's reference, and compiled for sm_90 offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import pytest


# Each rendered candidate on the given shapes, fp32 and bf16, against the spec's reference within its
# tolerance of the float64 truth (plus the slack PyTorch itself needs in that dtype).
INTERPRETED = textwrap.dedent(
    r'''
    import importlib.util, json, os, sys, tempfile, warnings
    os.environ["TRITON_INTERPRET"] = "1"
    warnings.simplefilter("ignore")
    import torch
    from autokernel.kernels import get_spec
    from autokernel.playbook.templates import get_template

    kernel, moves, shapes = json.loads(sys.argv[1])
    template, spec = get_template(kernel), get_spec(kernel)
    failures = []
    for n, params in enumerate(moves):
        path = os.path.join(tempfile.mkdtemp(), "candidate.py")
        with open(path, "w") as f:
            f.write(template.render(params))
        loaded = importlib.util.spec_from_file_location(f"candidate_{n}", path)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        gen = torch.Generator().manual_seed(n)
        for shape in shapes:
            for dtype in (torch.float32, torch.bfloat16):
                args = spec.make_inputs(shape, dtype, "cpu", gen, "normal")
                got = module.kernel_fn(*[a.clone() for a in args])
                truth = spec.reference(*[a.double() if a.is_floating_point() else a for a in args]).double()
                slack = (spec.reference(*args).double() - truth).abs().nan_to_num(0.0).max()
                atol, rtol = spec.tolerance(dtype)
                allowed = atol + rtol * truth.abs() + 2 * slack
                if got.shape != truth.shape or not bool(((got.double() - truth).abs() <= allowed).all()):
                    failures.append([params, shape, str(dtype)])
    print(json.dumps(failures))
    '''
)


def failures_under_interpreter(kernel: str, moves: list[dict], shapes: list[dict]) -> list:
    """[params, shape, dtype] of every move that misses the reference on a shape (one process for all)."""
    done = subprocess.run([sys.executable, "-c", INTERPRETED, json.dumps([kernel, moves, shapes])],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# Each Triton launch of a rendered candidate, captured on CPU tensors (never run) and compiled for sm_90 as
# the H100 would: what only the compiler rejects (a name bound in one branch of a loop) shows here.
SM90 = textwrap.dedent(
    r'''
    import importlib.util, json, sys, tempfile, warnings
    warnings.simplefilter("ignore")
    import torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction
    from autokernel.playbook.templates import get_template

    if "nvidia" not in triton.backends.backends:
        print(json.dumps({"skip": "this Triton has no NVIDIA backend"}))
        sys.exit(0)
    launches = []
    JITFunction.run = lambda self, *args, grid, warmup=False, **kw: launches.append((self, args, kw))
    Autotuner.run = lambda self, *args, **kw: self.fn.run(*args, **{**kw, **self.configs[0].all_kwargs()})
    TYPES = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.int64: "i64"}

    def argument_type(value):
        if isinstance(value, torch.Tensor):
            return "*" + TYPES[value.dtype]
        return "i32" if -2**31 <= value < 2**31 else "i64"

    kernel, moves, calls = json.loads(sys.argv[1])
    template, errors = get_template(kernel), {}
    for n, params in enumerate(moves):
        path = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False).name
        with open(path, "w") as f:
            f.write(template.render(params))
        loaded = importlib.util.spec_from_file_location(f"candidate_{n}", path)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        launches.clear()
        try:
            for args in calls:
                module.kernel_fn(*[torch.empty(shape, dtype=getattr(torch, dtype)) for shape, dtype in args])
            assert launches, "no Triton launch"
            for fn, a, kw in launches:
                values = {p.name: p.default for p in fn.params if p.has_default}  # a parameter left at its default
                values.update({**dict(zip(fn.arg_names, a)), **{k: v for k, v in kw.items() if k in fn.arg_names}})
                signature = {name: "constexpr" if i in fn.constexprs else argument_type(values[name])
                             for i, name in enumerate(fn.arg_names)}
                constants = {name: values[name] for i, name in enumerate(fn.arg_names) if i in fn.constexprs}
                options = {k: v for k, v in kw.items() if k in ("num_warps", "num_stages")}
                triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants),
                               target=GPUTarget("cuda", 90, 32), options=options)
        except Exception as e:
            if "ptxas" in str(e) and "not found" in str(e).lower():
                print(json.dumps({"skip": "no ptxas on this machine"}))
                sys.exit(0)
            errors[json.dumps(params, sort_keys=True)] = f"{type(e).__name__}: {str(e)[:500]}"
    print(json.dumps({"errors": errors}))
    '''
)


def sm90_compile_errors(kernel: str, moves: list[dict], calls: list[list]) -> dict:
    """{move: error} for the moves whose launches fail to compile for sm_90, each move called with every
    argument list of `calls` ([shape, dtype name] per argument); skips where Triton cannot target sm_90."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, never interpret
    done = subprocess.run([sys.executable, "-c", SM90, json.dumps([kernel, moves, calls])], capture_output=True,
                          text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result["errors"]
