"""The host work of our launch-bound starters (issue 19): the cross-entropy forward is one launch, and the
softmax launcher works its launch out once per shape and passes a contiguous input as it is.

The Triton kernels are replaced by stand-ins that record each launch, so these run in a moment with no
interpreter; the numbers (what this saves per call) come from scripts/launch_cost_bench.py and the GPU
run of scripts/fair_timing_probe.py, never from a test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from launch_cost_bench import load_stubbed  # noqa: E402

from autokernel.kernels import get_spec  # noqa: E402
from autokernel.playbook.templates import get_template  # noqa: E402


class Recorded:
    """A stand-in kernel that keeps each launch's grid and arguments."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


def _recorded(source: str, name: str):
    module, stubs = load_stubbed(source, name)
    recorders = {attr: Recorded() for attr in stubs}
    for attr, rec in recorders.items():
        setattr(module, attr, rec)
    return module, recorders


def _ce_inputs(rows=6, vocab=300):
    gen = torch.Generator().manual_seed(3)
    targets = torch.randint(0, vocab, (rows,), generator=gen)
    targets[1] = -100
    return torch.randn(rows, vocab, generator=gen), targets


def test_the_cross_entropy_starter_and_its_template_defaults_are_one_launch_per_call():
    template = get_template("cross_entropy")
    for name, source in (("starter", get_spec("cross_entropy").starters["triton"].read_text()),
                         ("template", template.render(template.DEFAULTS))):
        module, recorders = _recorded(source, f"_ce_{name}_launches")
        logits, targets = _ce_inputs()
        for _ in range(3):
            module.kernel_fn(logits, targets)
        launches = [(attr, launch) for attr, rec in recorders.items() for launch in rec.launches]
        assert len(launches) == 3, (name, [a for a, _ in launches])
        grid = launches[0][1][0]
        assert grid == (6,), (name, grid)  # one program per row (ROWS_PER_PROGRAM = 1 at the defaults)
        # every call hands the kernel the one ticket counter of this device and stream, zeroed when made
        (ticket,) = module._TICKETS.values()
        assert all(any(a is ticket for a in args) for _, (_, args, _) in launches), name
        assert int(ticket[0]) == 0, name


def test_the_softmax_launch_is_worked_out_once_per_shape_and_a_contiguous_input_goes_as_it_is():
    module, recorders = _recorded(get_spec("softmax").starters["triton"].read_text(), "_softmax_launches")
    planned = []
    plan = module._plan
    module._plan = lambda *a: planned.append(a) or plan(*a)
    x = torch.randn(2, 3, 1000)
    for _ in range(3):
        y = module.kernel_fn(x)
        assert y.shape == x.shape and y.is_contiguous()
    module.kernel_fn(torch.randn(5, 40))
    sliced = torch.randn(6, 1500)[:, :1000]  # rows 1500 apart: another plan, the same kernel
    module.kernel_fn(sliced)
    module.kernel_fn(sliced)
    assert [a[:3] for a in planned] == [(6, 1000, 1000), (5, 40, 40), (6, 1000, 1500)]
    launches = [launch for rec in recorders.values() for launch in rec.launches]
    assert len(launches) == 6
    assert all(launches[k][1][0] is x for k in range(3))  # the 3-D input itself, no 2-D view made per call
    assert launches[-1][1][0].stride() == (1500, 1) and launches[-1][1][4] == 1500  # the slice's own row stride


def _sources(kind):
    template = get_template(kind)
    return (("starter", get_spec(kind).starters["triton"].read_text()), ("template", template.render(template.DEFAULTS)))


def test_the_launch_plans_stay_bounded_under_dynamic_shapes():
    # A model whose shapes change at every call (a growing sequence, a varying batch): more distinct shapes
    # than the plan table holds, each call still launched once, the table never past its bound.
    for kind in ("softmax", "cross_entropy"):
        for name, source in _sources(kind):
            module, recorders = _recorded(source, f"_{kind}_{name}_bounded")
            bound = module.MAX_PLANS
            calls = bound + 40
            for k in range(calls):
                if kind == "softmax":
                    module.kernel_fn(torch.empty(1 + k % 3, 8 + k))
                else:
                    module.kernel_fn(torch.empty(1 + k % 3, 8 + k), torch.zeros(1 + k % 3, dtype=torch.int64))
                assert len(module._PLANS) <= bound, (kind, name, k)
            assert len([launch for rec in recorders.values() for launch in rec.launches]) == calls, (kind, name)
            # the newest shape is still kept, so a repeated call at it is not planned again
            assert any(key[1] == 8 + calls - 1 for key in module._PLANS), (kind, name)


def test_the_cross_entropy_ticket_table_stays_bounded():
    # Every (device, stream) pair gets its own counter; a process that makes streams without end must not
    # keep a counter for each. Entries of streams gone stand in for them: the next stream's counter is made
    # zeroed, used by the launch, and the table stays within its bound.
    for name, source in _sources("cross_entropy"):
        module, recorders = _recorded(source, f"_ce_{name}_tickets")
        bound = module.MAX_TICKETS
        for stream in range(bound):
            module._TICKETS[(torch.device("cpu"), 1000 + stream)] = torch.zeros(1, dtype=torch.int64)
        module.kernel_fn(*_ce_inputs())
        assert len(module._TICKETS) <= bound, name
        ticket = module._TICKETS[(torch.device("cpu"), 0)]
        (launch,) = [launch for rec in recorders.values() for launch in rec.launches]
        assert any(a is ticket for a in launch[1]) and int(ticket[0]) == 0, name


def test_the_launcher_benchmark_runs_the_old_launchers_against_todays_starters():
    """launch_cost_bench (and fair_timing_probe's "before" rows) put the old launchers on today's starters:
    a helper the old code names must still be found there, and the copies must still be what git holds."""
    import subprocess

    script = Path(__file__).parent.parent / "scripts" / "launch_cost_bench.py"
    done = subprocess.run([sys.executable, str(script), "--number", "3", "--repeat", "1"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if "before " in line and "after " in line]
    assert [line.split()[0] for line in rows] == ["softmax", "cross_entropy"], done.stdout
    assert not any("DIFFERS FROM GIT" in line for line in rows), done.stdout
