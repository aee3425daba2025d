"""A KernelBench problem is judged as KernelBench runs it: the Model is built and never put in eval mode, so a
BatchNorm normalises with the batch's own statistics and updates its running ones. The harness's reference, the
ModelNew check and Inductor's seed all follow that; a seed carries the buffer updates back into the module."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from autokernel.engine.problem_spec import problem_spec
from autokernel.engine.worker import Worker

from problem_support import inductor_seeds

CONV_BATCHNORM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.conv(x)) * 2.0


def get_inputs():
    return [torch.randn(4, 3, 12, 12) + 1.0]


def get_init_inputs():
    return []
'''


# In a process of its own (the seed picks Triton's interpreter as it is imported): Model and ModelNew built as
# KernelBench builds them, called twice, the second call starting from the running statistics the first left.
_PROBE = textwrap.dedent('''
    import importlib.util, sys
    import torch

    spec = importlib.util.spec_from_file_location("seeded", sys.argv[1])
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    torch.manual_seed(42)
    model = seed.Model()
    torch.manual_seed(42)
    model_new = seed.ModelNew()
    (x,) = seed.get_inputs()
    with torch.no_grad():
        for _ in range(2):
            assert torch.allclose(model_new(x), model(x), atol=1e-4, rtol=1e-4)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        mine, theirs = getattr(model_new.bn, name).double(), getattr(model.bn, name).double()
        assert torch.allclose(mine, theirs, atol=1e-5), (name, mine, theirs)
    assert int(model_new.bn.num_batches_tracked) == 2
    print("same outputs and running statistics after 2 calls")
''')


def _problem(tmp_path):
    path = tmp_path / "conv_batchnorm.py"
    path.write_text(textwrap.dedent(CONV_BATCHNORM))
    return path


def test_the_reference_normalises_with_the_batchs_statistics(tmp_path):
    spec = problem_spec(_problem(tmp_path), "cpu", "small")
    (x,) = spec.make_inputs({"draw": 1}, torch.float32, "cpu", torch.Generator().manual_seed(3), "normal")
    out = spec.reference(x)
    per_channel = out.transpose(0, 1).reshape(8, -1)
    # Training mode: each channel is centred on its batch mean (eval mode would give conv * 2, not centred).
    assert per_channel.mean(dim=1).abs().max() < 1e-4
    assert torch.allclose(per_channel.std(dim=1, unbiased=False), torch.full((8,), 2.0), atol=1e-2)


def test_the_seed_computes_batch_statistics_and_updates_the_running_ones(tmp_path):
    problem = _problem(tmp_path)
    (seed,) = inductor_seeds([problem], tmp_path / "seed.py")
    assert "_state(self, 'bn.running_mean').copy_(" in (tmp_path / "seed.py").read_text()
    with Worker(device="cpu") as w:
        report = w.check(seed["seed"], kernel="problem", problem=str(problem), size="small")
    assert report.passed, [(s.name, s.status, s.detail) for s in report.stages]

    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    done = subprocess.run([sys.executable, str(probe), seed["seed"]], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "same outputs and running statistics after 2 calls"
