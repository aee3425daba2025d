"""Checks of a kernel type's one Triton implementation beside tests/template_is_starter.py, shared by
tests/test_one_impl_softmax.py and tests/test_one_impl_cross_entropy.py: knob moves run under the interpreter
on shapes that reach every path of the starter, against the spec's reference, and compiled for sm_90 offline."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


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


def sm90_compile_errors(kernel: str, moves: list[dict], calls: list[list]) -> dict:
    """{move and call: error} for the moves whose launches fail to compile for sm_90, each move called with
    every argument list of `calls` ([shape, dtype name] per argument); skips where Triton cannot target sm_90."""
    from test_kernel_library import compile_for_hopper

    return compile_for_hopper([(f"{json.dumps(move, sort_keys=True)} {args}", kernel, move, args)
                               for move in moves for args in calls])
