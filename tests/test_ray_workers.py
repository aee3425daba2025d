"""Workers on a Ray cluster (engine/ray_workers.py), on a local cluster the tests start: a candidate checked
and timed through an actor gets the local worker's verdict, a killed actor is a lost worker (never a
failed candidate), a loop over two actors loses no experiment when one dies, Ctrl-C ends remote work, and
a whole `autokernel optimize --ray local` session completes with nothing lost when an actor dies mid-run."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray extra: pip install 'autokernel-tui[ray]'")

from autokernel.engine.errors import UserError  # noqa: E402
from autokernel.engine.ray_workers import RayWorker, SourceFile, ray_workers  # noqa: E402
from autokernel.engine.worker import Worker, WorkerLost  # noqa: E402
from autokernel.kernels import get_spec  # noqa: E402

BAD = Path(__file__).parent / "bad_candidates"
SOFTMAX_STARTER = str(get_spec("softmax").starters["triton"])
ALIVE_AFTER_KILL_S = 60  # how long a dead actor's worker process may take to be reaped before it counts as left behind


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A two-CPU Ray cluster for this file; the workers' cache folder is set before it starts, since
    every actor (of this process or of a child driver) inherits the cluster's environment."""
    saved = os.environ.get("AUTOKERNEL_CACHE_DIR")
    os.environ["AUTOKERNEL_CACHE_DIR"] = str(tmp_path_factory.mktemp("ray_cache"))
    ray.init(num_cpus=2, object_store_memory=100 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
    if saved is None:
        os.environ.pop("AUTOKERNEL_CACHE_DIR", None)
    else:
        os.environ["AUTOKERNEL_CACHE_DIR"] = saved


@pytest.fixture
def workers(cluster):
    made: list[RayWorker] = []

    def make(count: int, **kw) -> list[RayWorker]:
        ws = ray_workers("auto", "cpu", count=count, **kw)
        made.extend(ws)
        return ws

    yield make
    for w in made:
        w.close()


def _sleeper(tmp_path: Path, name: str = "sleeper.py") -> Path:
    """A candidate that never returns from its first call: it keeps an actor busy mid-stage for as long
    as the test needs."""
    path = tmp_path / name
    path.write_text("import time\n\n\ndef kernel_fn(x):\n    while True:\n        time.sleep(0.05)\n")
    return path


def _worker_pid(actor) -> int:
    """The process id of the worker process inside an actor (the actor answers a second call while busy)."""
    return ray.get(actor.__ray_call__.remote(lambda host: host.worker._proc.pid), timeout=60)


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie is dead too (reaped by whoever adopted it, later)
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.2)
    return False


def _stages(report):
    return [(s.name, s.status, s.detail) for s in report.stages]


def test_a_starter_through_an_actor_gets_the_local_workers_verdict_and_timing(workers):
    (rw,) = workers(1)
    assert rw.device == rw.device_id == "cpu" and rw.label.startswith("ray:") and rw.label.endswith("/cpu0")
    remote_seen, local_seen = [], []
    remote = rw.check(SOFTMAX_STARTER, kernel="softmax", on_stage=lambda *a: remote_seen.append(a[:3]))
    with Worker(device="cpu") as w:
        local = w.check(SOFTMAX_STARTER, kernel="softmax", on_stage=lambda *a: local_seen.append(a[:3]))
        shape = {"rows": 16, "cols": 256}
        (local_rec,) = w.bench(SOFTMAX_STARTER, kernel="softmax", shapes=[shape], dtype="fp32")
    assert local.passed and remote.passed
    assert _stages(remote) == _stages(local)
    assert remote_seen == local_seen  # the same progress, live, in the same order
    assert (remote.candidate, remote.kernel, remote.backend, remote.device) == (SOFTMAX_STARTER, "softmax", "triton", "cpu")
    assert (remote.error, remote.skipped_shapes, remote.shapes_total) == (local.error, local.skipped_shapes, local.shapes_total)
    assert remote.coverage() == local.coverage()
    (rec,) = rw.bench(SOFTMAX_STARTER, kernel="softmax", shapes=[shape], dtype="fp32")
    same = ("kernel", "backend", "shape", "dtype", "device_name", "metric", "meaningful", "note", "baseline", "timed_by")
    assert {k: getattr(rec, k) for k in same} == {k: getattr(local_rec, k) for k in same}
    # every field came back through Ray, filled as the local one is (the times themselves are not compared)
    assert {k: type(v) for k, v in vars(rec).items()} == {k: type(v) for k, v in vars(local_rec).items()}


def test_bad_candidates_fail_as_they_do_locally_and_bench_errors_are_runtime_errors(workers, tmp_path):
    (rw,) = workers(1)
    syntax = rw.check(str(BAD / "syntax_error.py"), kernel="softmax")
    assert syntax.stages[0].status == "fail" and "SyntaxError" in syntax.stages[0].detail
    crash = rw.check(str(BAD / "crash.py"), kernel="softmax")
    assert crash.stages[0].status == "crash" and "SIGSEGV" in crash.stages[0].detail
    assert rw.restarts == 0  # the crash ended the worker process; the next request starts another
    assert rw.check(str(BAD / "no_kernel_fn.py"), kernel="softmax").stages[0].status == "fail"
    assert rw.restarts == 1 and not rw.lost  # a crashing candidate is the candidate's failure, not a lost worker
    with pytest.raises(RuntimeError):
        rw.bench(str(BAD / "crash.py"), kernel="softmax", shapes=[{"rows": 4, "cols": 64}], dtype="fp32")
    # the candidate travels as text: a file of the same name with other text is a different candidate
    renamed = tmp_path / "crash.py"
    renamed.write_text((BAD / "syntax_error.py").read_text())
    assert "SyntaxError" in rw.check(str(renamed), kernel="softmax").stages[0].detail


def test_a_killed_actor_is_a_lost_worker_and_its_work_stops(workers, tmp_path):
    rw, other = workers(2, stage_timeout=300)
    seen, pids = [], []

    def on_stage(stage, status, detail, seconds):
        seen.append((stage, status))
        if (stage, status) == ("smoke", "running"):
            pids.append(_kill(rw))

    with pytest.raises(WorkerLost, match=rw.label):
        rw.check(str(_sleeper(tmp_path)), kernel="softmax", on_stage=on_stage)
    assert ("smoke", "running") in seen and rw.lost
    assert _gone(pids[0], ALIVE_AFTER_KILL_S), "the dead actor's worker process is still running"
    with pytest.raises(WorkerLost):  # and stays lost
        rw.bench(SOFTMAX_STARTER, kernel="softmax", shapes=[{"rows": 4, "cols": 64}], dtype="fp32")
    assert other.check(str(BAD / "no_kernel_fn.py"), kernel="softmax").stages[0].status == "fail"


def _kill(rw: RayWorker) -> int:
    """Kill the actor from outside, as a node going away would (not through the handle); its worker
    process's id, to see that the work stopped too."""
    pid = _worker_pid(rw._actor)
    ray.kill(rw._actor, no_restart=True)
    return pid


def test_a_loop_over_two_actors_accounts_for_every_experiment_when_one_dies(workers, tmp_path):
    """A small pool: experiments from a queue, each worker in a thread, a lost worker's experiment put
    back for the other. The actor that starts the sleeper is killed mid-stage; the sleeper then runs
    on the survivor, whose stage timeout ends it."""
    a, b = workers(2, stage_timeout=20, load_timeout=20)
    experiments = {"sleeper": str(_sleeper(tmp_path)), "syntax": str(BAD / "syntax_error.py"),
                   "no_kernel_fn": str(BAD / "no_kernel_fn.py"), "crash": str(BAD / "crash.py")}
    todo: queue.Queue = queue.Queue()
    for name in experiments:
        todo.put(name)
    done: dict[str, tuple[str, object]] = {}
    lost: list[tuple[str, str]] = []
    killed: list[str] = []
    lock = threading.Lock()

    def run(w: RayWorker) -> None:
        while len(done) < len(experiments):  # an experiment given back by a lost worker may come later
            try:
                name = todo.get(timeout=0.2)
            except queue.Empty:
                continue

            def on_stage(stage, status, detail, seconds, name=name):
                with lock:
                    first = name == "sleeper" and status == "running" and not killed
                    if first:
                        killed.append(w.label)
                if first:
                    _kill(w)

            try:
                report = w.check(experiments[name], kernel="softmax", on_stage=on_stage)
            except WorkerLost:
                with lock:
                    lost.append((name, w.label))
                todo.put(name)
                return
            with lock:
                done[name] = (w.label, report)

    threads = [threading.Thread(target=run, args=(w,)) for w in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=280)
    assert not any(t.is_alive() for t in threads)
    assert sorted(done) == sorted(experiments)  # nothing lost, nothing run twice to completion
    assert lost == [("sleeper", killed[0])]
    survivor = b.label if killed[0] == a.label else a.label
    ran_on, report = done["sleeper"]
    assert ran_on == survivor and report.stages[0].status == "timeout"
    assert done["syntax"][1].stages[0].status == "fail" and done["crash"][1].stages[0].status == "crash"


_INTERRUPTED_DRIVER = """
import sys
from autokernel.engine.cli import _hear_sigint
from autokernel.engine.ray_workers import ray_workers
import ray
_hear_sigint()  # as the engine's CLI does: under a background start (CI) SIGINT arrives ignored
(w,) = ray_workers(sys.argv[1], "cpu", count=1)

def on_stage(stage, status, *rest):
    if status == "running":
        pid = ray.get(w._actor.__ray_call__.remote(lambda host: host.worker._proc.pid))
        print("running", stage, pid, flush=True)

w.check(sys.argv[2], kernel="softmax", on_stage=on_stage)
"""


def test_ctrl_c_in_the_engine_stops_the_remote_work(cluster, tmp_path):
    """An engine process (its own Ray driver, joined to the cluster by address) is interrupted while its
    actor runs a candidate that never returns: the engine exits and the candidate's process ends."""
    engine = subprocess.Popen([sys.executable, "-c", _INTERRUPTED_DRIVER, cluster, str(_sleeper(tmp_path))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    try:
        for line in engine.stdout:
            if line.split()[:2] == ["running", "smoke"]:
                pid = int(line.split()[2])
                break
        assert pid, engine.communicate(timeout=60)[1][-2000:]
        time.sleep(1)  # inside the candidate's first call by now
        engine.send_signal(signal.SIGINT)
        _, err = engine.communicate(timeout=250)  # bounded by pytest's own timeout, less a margin
    finally:
        engine.kill()
    assert engine.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    assert _gone(pid, ALIVE_AFTER_KILL_S), "the interrupted engine's candidate still runs"


def test_bad_requests_are_one_line_errors(cluster):
    with pytest.raises(UserError, match="has no GPUs"):
        ray_workers("auto", "cuda")
    with pytest.raises(UserError, match="3 Ray workers asked for, but the cluster .* has 2 CPUs"):
        ray_workers("auto", "cpu", count=3)
    with pytest.raises(UserError, match="unknown device"):
        ray_workers("auto", "tpu")


def test_no_cluster_at_an_address_is_a_one_line_error():
    """In a process of its own: this file's cluster must not be the one "auto" finds."""
    code = ("from autokernel.engine.ray_workers import ray_workers\n"
            "from autokernel.engine.errors import UserError\n"
            "for address in ('127.0.0.1:9', 'nonsense'):\n"
            "    try:\n        ray_workers(address, 'cpu', count=1)\n"
            "    except UserError as e:\n        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.stdout.splitlines() == [
        "could not join the Ray cluster at '127.0.0.1:9': nothing answers there (Connection refused)",
        "not a Ray address: 'nonsense' (auto, local, or host:port of the head node)"], out.stdout + out.stderr[-2000:]


def test_a_source_file_lands_on_one_path_per_content(tmp_path):
    a = SourceFile("cand.py", "x = 1\n")
    assert a.place(tmp_path) == a.place(tmp_path) and a.place(tmp_path).read_text() == "x = 1\n"
    b = SourceFile("cand.py", "x = 2\n")
    assert b.place(tmp_path) != a.place(tmp_path) and b.place(tmp_path).name == "cand.py"


# -- a whole session on a local Ray cluster (`autokernel optimize --ray local`) -----------------------------
TINY = Path(__file__).parent / "data" / "tiny_softmax.py"


def _actors_at_work(root: int) -> list[tuple[int, int]]:
    """(age rank, pid) of the Ray actor processes below `root` that have started their worker process,
    oldest worker first (`ps`, as a user looks: the cluster `--ray local` starts is the engine's child)."""
    ps = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,etimes=,args="], capture_output=True, text=True)  # -ww: whole lines
    rows = [line.split(None, 3) for line in ps.stdout.splitlines()]
    procs = {int(pid): (int(ppid), int(age), args) for pid, ppid, age, args in (r + [""] * (4 - len(r)) for r in rows)}
    below, todo = set(), [root]
    while todo:
        parent = todo.pop()
        kids = [p for p, (pp, _, _) in procs.items() if pp == parent]
        below.update(kids)
        todo.extend(kids)
    actors = {p for p in below if procs[p][2].startswith("ray::WorkerHost")}
    workers = [(-procs[p][1], procs[p][0]) for p in below
               if procs[p][0] in actors and "autokernel.engine.worker" in procs[p][2]]
    return sorted(workers)


def test_a_ray_session_that_loses_an_actor_mid_run_loses_no_experiment(tmp_path):
    from autokernel.engine import events as ev
    from autokernel.engine.store import Store

    env = dict(os.environ, AUTOKERNEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "autokernel.engine.cli", "optimize", str(TINY), "--headless",
                             "--device", "cpu", "--no-integrate", "--db", str(tmp_path / "s.db"),
                             "--ray", "local", "--workers", "2", "--max-experiments", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 400
        while len(_actors_at_work(proc.pid)) < 2:  # the second starts with the first round's second variant
            assert proc.poll() is None and time.monotonic() < deadline, "two Ray actors never got to work"
            time.sleep(0.2)
        _, killed = _actors_at_work(proc.pid)[0]
        os.kill(killed, signal.SIGKILL)  # the actor process dies, as on a lost node
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    store = Store(tmp_path / "s.db")
    (row,) = store.sessions()
    events = list(store.iter_events(row["id"]))
    assert proc.returncode == 0 and row["status"] == "completed", err[-3000:] + out[-3000:]
    (note,) = [e for e in events if isinstance(e, ev.Log) and " lost: " in e.message]
    lost = note.message.split()[1]
    assert lost.startswith("ray:") and "runs again on another worker" in note.message, note.message
    experiments: dict[str, list] = {}
    for e in events:
        if isinstance(e, (ev.CandidateWritten, ev.StageResult, ev.BenchResult, ev.Decision)):
            experiments.setdefault(e.candidate_id, []).append(e)
    assert len(experiments) == 5 and row["summary"]["experiments"] == 5
    for seq in experiments.values():  # every experiment written, judged on all five stages and decided once
        assert isinstance(seq[0], ev.CandidateWritten) and isinstance(seq[-1], ev.Decision), seq
        assert len({e.stage for e in seq if isinstance(e, ev.StageResult) and e.status != "running"}) == 5, seq
        assert sum(isinstance(e, ev.Decision) for e in seq) == 1
    judged = [e for e in events if isinstance(e, ev.StageResult) and e.status != "running"]
    assert not [e for e in judged if e.status == "crash"]  # a lost actor is not the candidate's crash
    after = [e for e in judged if events.index(e) > events.index(note)]
    assert after and lost not in {e.worker for e in after}  # the survivor ran everything from then on
    assert {e.worker for e in judged} <= {lost, *(e.worker for e in after)} and all(
        e.worker.startswith("ray:") and e.worker_device == "cpu" for e in judged)
