"""In KernelBench mode a problem whose kept kernels are all slower than eager still gets a ModelNew that runs a
kernel of ours (the least slow one): without one, ModelNew is the problem's Model, no submission at all, while a
correct slower kernel is a submission that counts in fast_0 and in no fast_p above it. An ordinary session keeps
slower kernels out of the model, as before."""

from __future__ import annotations

import pytest

from autokernel.engine import events as ev
from autokernel.engine import integrate
from autokernel.engine.session import OptimizeSession, SessionConfig
from autokernel.engine.store import Store

from loop_doubles import PROBLEM_SRC, FakeWorker, ScriptedAgent, fake_profiler, fake_source, install_fake_specs


@pytest.mark.parametrize("mode", ["kernelbench", "model"])
def test_the_least_slow_kernel_makes_the_submission_only_in_kernelbench_mode(tmp_path, monkeypatch, mode):
    specs = install_fake_specs(monkeypatch, tmp_path, kinds=("fakesoft", "fakenorm"), starter_ms=1.25)  # 0.8x eager
    specs["fakenorm"].starters["triton"].write_text(fake_source(2.0, tag="fakenorm"))  # 0.5x eager
    handed: list[list[dict]] = []

    def fake_integration(model_path, device, kernels, folder, **kw):
        handed.append(kernels)
        return ev.IntegrationResult(replaced=[{"kind": k["kind"], "calls": 1} for k in kernels], correct=True,
                                    detail="KernelBench check: 3/3 trials; ModelNew: /x/model_new.py",
                                    model_ms=1.25, eager_ms=1.0, speedup_eager=0.8, meaningful=True)

    monkeypatch.setattr(integrate, "integrate_session_kernels", fake_integration)
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM_SRC)
    store = Store(tmp_path / "s.db")
    config = SessionConfig(model_path=str(problem), device="cpu", max_experiments=4, integration=mode)
    session = OptimizeSession(config, store, agent=ScriptedAgent(), worker=FakeWorker(meaningful=True),
                              profiler=fake_profiler(("fakesoft", "fakenorm")))
    session.run()
    logs = [e.message for _, e in store.events(session.session_id) if isinstance(e, ev.Log)]
    if mode == "kernelbench":
        assert [k["kind"] for k in handed[0]] == ["fakesoft"]  # the nearer eager of the two, alone
        assert any("ModelNew runs fakesoft's best" in m and "0.80x eager" in m for m in logs), logs
        assert any(m == "not swapping into the model: fakenorm: its best (fakenorm-0002) is not faster than eager"
                   for m in logs), logs
    else:
        assert handed == [] and any("fakesoft: its best" in m and "not faster than eager" in m for m in logs), logs
