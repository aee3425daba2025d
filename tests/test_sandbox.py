"""Candidates that reach out of their worker (tests/sandbox_candidates/): a socket, a write to the user's home, a
key read from it or from the environment, a shell. Each comes twice or three times: in plain sight (the static check refuses it
before import), hidden from the static check (the worker's audit hook, its scrubbed environment or HOME), and
through libc with ctypes or by a plain file read (only the kernel's layers see it: network namespace, seccomp,
Landlock). Every test
asserts the side effect did not happen (no connection reached the test's server, no file in the home, no key in
the detail, no file the shell would have made) and the one-line reason the check gives. A layer this machine
lacks is a skip that names the layer, never a silent pass; `test_without_the_sandbox_every_hidden_attack_works`
shows each of these attacks succeeds when the operating-system layers are off, so the tests can fail."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autokernel.engine import sandbox
from autokernel.engine.worker import Worker
from autokernel.kernels import get_spec

CANDIDATES = Path(__file__).parent / "sandbox_candidates"
KEY = "sk-sandbox-test-" + secrets.token_hex(8)


class Server:
    """A TCP listener on the loopback that counts what reaches it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def machine() -> dict[tuple[str, str], sandbox.Protection]:
    return {(p.rule, p.layer): p for p in sandbox.probe("cpu")}


def need(machine: dict, rule: str, layer: str) -> None:
    """Skip, naming the layer and the test that holds the rule without it, where this machine lacks it."""
    p = machine.get((rule, layer))
    if p is None or not p.active:
        why = p.how if p else "not reported"
        pytest.skip(f"{rule}: the {layer} layer is off on this machine ({why}); the static check and the "
                    f"audit hook (test_*_in_plain_sight, test_*_hidden_*) hold this rule here")


SECRET_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- " + secrets.token_hex(8)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """The engine's HOME in these tests, with a private key planted in it."""
    home = tmp_path_factory.mktemp("home")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text(SECRET_KEY + "\n")
    return home


@pytest.fixture(scope="module")
def spared(tmp_path_factory) -> Path:
    """The folder the tests write candidates in, made before a worker starts: the fake home lies in the temporary
    folder, so a worker's read layer spares the temporary folder's entries one by one, as they are at its start."""
    return tmp_path_factory.mktemp("candidates")


@pytest.fixture
def tmp_path(spared, request) -> Path:
    """Each test's own folder, inside `spared` (pytest's would be made after the module's worker started)."""
    path = spared / request.node.name.replace("/", "_")[:80]
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.close()


def _worker_with(home: Path, **env: str):
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(home))
    mp.setenv("OPENAI_API_KEY", KEY)
    for k, v in env.items():
        mp.setenv(k, v)
    return mp, Worker(device="cpu")


@pytest.fixture(scope="module")
def worker(home, spared):
    mp, w = _worker_with(home)
    yield w
    w.close()
    mp.undo()


def fill(tmp_path: Path, name: str, **subs: object) -> Path:
    """A copy of the candidate with its placeholders (__PORT__, __TARGET__) filled in."""
    text = (CANDIDATES / name).read_text()
    for k, v in subs.items():
        text = text.replace(f"__{k}__", str(v))
    out = tmp_path / name
    out.write_text(text)
    return out


def refusal(worker: Worker, path: Path) -> str:
    """The smoke stage's detail: the candidate failed there, with a one-line reason."""
    report = worker.check(str(path), kernel="softmax")
    bad = report.first_failure
    assert bad is not None and (bad.name, bad.status) == ("smoke", "fail"), report.to_json()
    assert "\n" not in bad.detail and bad.detail
    return bad.detail


# -- in plain sight: the static check, before the candidate is imported ---------------------------------

@pytest.mark.parametrize("name, words", [
    ("net_socket.py", "imports socket: a kernel has no use for the network"),
    ("env_key.py", "reads the environment variable OPENAI_API_KEY: a kernel has no use for credentials"),
    ("shell_subprocess.py", "imports subprocess: a kernel may not start processes"),
])
def test_each_rule_in_plain_sight_is_refused_by_the_static_check(worker, server, tmp_path, name, words):
    marker = tmp_path / "shell-ran"
    before = server.connections
    detail = refusal(worker, fill(tmp_path, name, PORT=server.port, TARGET=marker))
    assert detail == f"{name}: {words}"
    assert server.connections == before and not marker.exists()


# -- network -------------------------------------------------------------------------------------------

def test_a_socket_hidden_from_the_static_check_is_refused_by_the_audit_hook(worker, server, tmp_path):
    before = server.connections
    detail = refusal(worker, fill(tmp_path, "net_hidden.py", PORT=server.port))
    assert "PermissionError: [Errno 13] the worker's sandbox allows no network" in detail, detail
    assert server.connections == before


def test_a_socket_through_libc_meets_the_kernel(machine, worker, server, tmp_path):
    """Seccomp refuses the socket (EACCES); without it the namespace has no route to the test's server."""
    if not (machine[("network", "seccomp")].active or machine[("network", "netns")].active):
        need(machine, "network", "seccomp")
    before = server.connections
    detail = refusal(worker, fill(tmp_path, "net_libc.py", PORT=server.port))
    assert server.connections == before
    if machine[("network", "seccomp")].active:
        assert "PermissionError: [Errno 13] socket() failed" in detail and sandbox.REFUSED in detail, detail
    else:
        assert "connect() failed" in detail, detail


# -- the user's home -------------------------------------------------------------------------------------

def test_a_write_into_the_home_is_refused_by_landlock(machine, worker, home, tmp_path):
    need(machine, "writes", "landlock")
    target = home / ".bashrc"
    detail = refusal(worker, fill(tmp_path, "home_write.py", TARGET=target))
    assert f"PermissionError: [Errno 13] Permission denied: '{target}'" in detail, detail
    assert sandbox.REFUSED in detail
    assert not target.exists()


def test_a_write_to_tilde_lands_in_the_workers_scratch_folder(worker, home, tmp_path):
    """The environment layer: HOME is the worker's own folder, so `~` is never the user's home."""
    detail = refusal(worker, fill(tmp_path, "home_tilde.py"))
    assert detail.startswith("kernel_fn raised RuntimeError: wrote /") and sandbox.SCRATCH_PREFIX in detail, detail
    assert str(home) not in detail and not (home / ".ssh" / "authorized_keys").exists()


def test_a_key_read_from_the_home_is_refused_by_landlock(machine, worker, home, tmp_path):
    need(machine, "reads", "landlock")
    target = home / ".ssh" / "id_rsa"
    detail = refusal(worker, fill(tmp_path, "home_read.py", TARGET=target))
    assert detail.startswith(f"kernel_fn raised PermissionError: [Errno 13] Permission denied: '{target}'"), detail
    assert detail.endswith(f"({sandbox.REFUSED})"), detail
    assert SECRET_KEY not in detail


def test_a_file_built_in_a_caches_temporary_folder_can_be_renamed_into_the_cache(machine, worker, tmp_path):
    """Triton builds each kernel in a temporary folder inside its cache and renames it up: a Landlock layer
    that does not grant that rename (REFER) refuses it with EXDEV, and every cold GPU kernel fails."""
    need(machine, "reads", "landlock")
    report = worker.check(str(fill(tmp_path, "cache_rename.py")), kernel="softmax")
    detail = report.first_failure.detail
    assert "renamed up into both caches" in detail and "cross-device" not in detail, detail


def test_on_a_gpu_the_read_layer_waits_to_be_asked_for(monkeypatch, tmp_path):
    """Until a GPU session has run whole under it, the read layer is opt-in there, and says how."""
    monkeypatch.delenv(sandbox.READS_ON_CUDA, raising=False)
    off = sandbox._landlock_reads(tmp_path, "cuda")
    assert (off.rule, off.layer, off.active) == ("reads", "landlock", False)
    assert f"{sandbox.READS_ON_CUDA}=on" in off.how


def test_the_accounts_own_home_is_out_of_reach_too(machine, worker, tmp_path):
    """HOME names the worker's scratch folder, but the password database still names the user's home."""
    need(machine, "reads", "landlock")
    import pwd

    account = Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()
    detail = refusal(worker, fill(tmp_path, "home_account.py"))
    assert detail.startswith(f"kernel_fn raised PermissionError: [Errno 13] Permission denied: '{account}'"), detail
    assert detail.endswith(f"({sandbox.REFUSED})"), detail


def test_a_user_checking_a_thief_in_a_real_engine_keeps_the_key(machine, home, tmp_path):
    """`autokernel check` as a user runs it, HOME holding the key: the engine tells the worker which home to keep
    out and which folder the candidate is in."""
    need(machine, "reads", "landlock")
    target = home / ".ssh" / "id_rsa"
    detail = check_in_an_engine(fill(tmp_path, "home_read.py", TARGET=target), home)
    assert f"PermissionError: [Errno 13] Permission denied: '{target}'" in detail and SECRET_KEY not in detail, detail


def test_what_a_child_may_read_is_derived_and_keeps_every_home_out(tmp_path, monkeypatch):
    """No layer applied here: the list the read layer is built from, for a home lying in a folder that is spared
    (the temporary folder, in these tests) and files the engine named inside and beside it."""
    base = tmp_path / "base"
    home, proj, other = base / "home", base / "home" / "proj", base / "other"
    for d in (home / ".ssh", proj, other):
        d.mkdir(parents=True)
    for f in (home / "model.py", proj / "model.py", home / ".ssh" / "id_rsa"):
        f.write_text("")
    scratch = base / "scratch"
    scratch.mkdir()
    monkeypatch.setenv(sandbox.HOMES_VAR, str(home))
    monkeypatch.setenv(sandbox.READABLE_VAR, os.pathsep.join(map(str, [home / "model.py", proj / "model.py", base])))
    rules = dict(sandbox.readable_paths(scratch))
    assert rules[home / "model.py"] is False and rules[proj] is True  # a file at the top of a home: that file alone
    assert rules[other] is True and rules[scratch] is True and base not in rules  # the home's holder: entry by entry
    assert home not in rules and not any(p.is_relative_to(home / ".ssh") for p in rules)
    assert rules[Path(sys.prefix).resolve()] is True and rules[Path(sandbox.__file__).parent.resolve()] is True
    assert {p for p in rules if p.is_relative_to(home)} == {home / "model.py", proj}


def test_a_crowded_temporary_folder_never_pushes_python_past_the_cap_on_rules(tmp_path, monkeypatch):
    """A temporary folder holding a home is spared entry by entry; with more entries than the rules allow, the
    ones cut are its own, never Python's prefix or the package (the child could not start without them)."""
    base = tmp_path / "crowded"
    (base / "home").mkdir(parents=True)
    for i in range(40):
        (base / f"entry{i:02d}").mkdir()
    scratch = base / "scratch"
    scratch.mkdir()
    monkeypatch.setenv(sandbox.HOMES_VAR, str(base / "home"))
    monkeypatch.delenv(sandbox.READABLE_VAR, raising=False)
    everything = dict(sandbox.readable_paths(scratch))
    monkeypatch.setattr(sandbox, "MAX_READ_RULES", len(everything) - 20)
    rules = dict(sandbox.readable_paths(scratch))
    assert len(rules) == len(everything) - 20 and rules[scratch] is True
    assert rules[Path(sys.prefix).resolve()] is True and rules[Path(sandbox.__file__).parent.resolve()] is True
    assert sum(p.parent == base for p in rules) < sum(p.parent == base for p in everything)  # its entries were cut


def test_the_engine_names_the_users_files_and_home_to_the_child(tmp_path, monkeypatch):
    """What the child is told: the paths on the engine's command line and those allow_read declared (a resumed
    session's model), the folders it may write, and the home its own HOME no longer names."""
    cand, model = tmp_path / "cand.py", tmp_path / "m" / "model.py"
    model.parent.mkdir()
    cand.write_text("")
    model.write_text("")
    monkeypatch.setattr(sys, "argv", ["autokernel", "check", str(cand), "--kernel", "softmax", "--device=cpu"])
    monkeypatch.setattr(sandbox, "_declared", [])
    sandbox.allow_read(model)
    env = sandbox.child_env({"HOME": "/home/u", sandbox.READABLE_VAR: "/data/set"}, writable=[tmp_path / "w"])
    assert env[sandbox.READABLE_VAR].split(os.pathsep) == ["/data/set", str(model), str(cand)]
    assert env[sandbox.WRITABLE_VAR] == str(tmp_path / "w")
    assert env[sandbox.HOMES_VAR].split(os.pathsep)[0] == "/home/u"


def test_the_probe_runs_once_per_process_and_worker_environment(monkeypatch):
    """Each session logs the layers: the child that finds them is started once, not at every session."""
    first = sandbox.probe("cpu")
    monkeypatch.setattr(sandbox.subprocess, "run", lambda *a, **k: pytest.fail("a second probe was started"))
    assert sandbox.probe("cpu") == first


# -- keys ------------------------------------------------------------------------------------------------

def test_a_key_in_the_engines_environment_never_reaches_the_worker(worker, tmp_path):
    detail = refusal(worker, fill(tmp_path, "env_hidden.py"))
    assert detail.startswith("kernel_fn raised RuntimeError: no API variable in the environment"), detail
    assert KEY not in detail


def check_in_an_engine(path: Path, home: Path, **env: str) -> str:
    """`autokernel check` as a user runs it, with the key in the engine's own environment from its start (what
    /proc/<engine>/environ shows): the smoke stage's detail."""
    r = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "check", str(path), "--kernel", "softmax",
                        "--device", "cpu", "--json"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HOME": str(home), "OPENAI_API_KEY": KEY, **env})
    assert r.returncode == 1, r.stderr  # the candidate failed; the engine did not
    return json.loads(r.stdout)["stages"][0]["detail"]


def test_the_engines_environment_is_out_of_reach_through_proc(machine, home, tmp_path):
    """/proc/<engine>/environ still holds the key: with no capabilities the worker may not read another process."""
    need(machine, "environment", "caps")
    detail = check_in_an_engine(fill(tmp_path, "env_parent.py"), home)
    assert "PermissionError: [Errno 13] Permission denied: '/proc/" in detail and sandbox.REFUSED in detail, detail
    assert KEY not in detail


# -- processes -------------------------------------------------------------------------------------------

def test_a_shell_hidden_from_the_static_check_is_refused_by_the_audit_hook(worker, tmp_path):
    marker = tmp_path / "shell-ran"
    detail = refusal(worker, fill(tmp_path, "shell_hidden.py", TARGET=marker))
    assert "PermissionError: [Errno 1] the worker's sandbox allows no new processes (os.system a shell)" in detail
    assert not marker.exists()


def test_a_shell_through_libc_is_refused_by_seccomp(machine, worker, tmp_path):
    need(machine, "processes", "seccomp")
    marker = tmp_path / "shell-ran"
    detail = refusal(worker, fill(tmp_path, "shell_libc.py", TARGET=marker))
    assert "PermissionError: [Errno 1] system() failed" in detail and sandbox.REFUSED in detail, detail
    assert not marker.exists()


def test_a_whole_problem_model_new_is_held_the_same_while_it_is_built(machine, worker, tmp_path):
    need(machine, "processes", "seccomp")
    marker = tmp_path / "shell-ran"
    problem = Path(__file__).parent / "kernelbench_problems" / "level1" / "4_cumsum.py"
    report = worker.check(str(fill(tmp_path, "model_new_shell.py", TARGET=marker)), kernel="problem",
                          problem=str(problem), size="small")
    bad = report.first_failure
    assert bad is not None and (bad.name, bad.status) == ("smoke", "fail"), report.to_json()
    assert bad.detail == f"building ModelNew raised PermissionError: [Errno 1] system() failed ({sandbox.REFUSED})"
    assert not marker.exists()


# -- the engine and the next candidate ----------------------------------------------------------------

def test_after_the_attacks_the_same_worker_passes_a_good_candidate(worker, server, home, tmp_path):
    restarts = worker.restarts
    for name in ("net_libc.py", "home_write.py", "shell_libc.py", "env_parent.py", "home_read.py"):
        refusal(worker, fill(tmp_path, name, PORT=server.port, TARGET=home / ".ssh" / "id_rsa"))
    report = worker.check(str(get_spec("reduce").starters["triton"]), kernel="reduce")
    assert report.passed, report.to_json()
    assert worker.restarts == restarts  # nothing the attacks did ended the worker


def test_without_the_sandbox_every_hidden_attack_works(home, server, tmp_path):
    """The control: with the operating-system layers off, the libc attacks reach the server, the home and the
    shell, and the engine's key is read out of /proc. The tests above would fail without the layers."""
    mp, w = _worker_with(home, AUTOKERNEL_SANDBOX="off")
    try:
        before = server.connections
        w.check(str(fill(tmp_path, "net_libc.py", PORT=server.port)), kernel="softmax")
        target, marker = home / "open-door", tmp_path / "shell-ran"
        w.check(str(fill(tmp_path, "home_write.py", TARGET=target)), kernel="softmax")
        w.check(str(fill(tmp_path, "shell_libc.py", TARGET=marker)), kernel="softmax")
        read = w.check(str(fill(tmp_path, "home_read.py", TARGET=home / ".ssh" / "id_rsa")), kernel="softmax")
    finally:
        w.close()
        mp.undo()
    assert server.connections == before + 1
    assert target.exists() and marker.exists()
    assert SECRET_KEY in read.first_failure.detail
    assert KEY in check_in_an_engine(fill(tmp_path, "env_parent.py"), home, AUTOKERNEL_SANDBOX="off")


# -- what the engine gives the worker, and what the doctor says --------------------------------------

def test_the_workers_environment_keeps_what_the_device_needs_and_no_credential():
    env = sandbox.child_env({"PATH": "/usr/bin", "HOME": "/home/u", "CUDA_HOME": "/opt/cuda", "TRITON_INTERPRET": "1",
                             "AUTOKERNEL_DB": "/x.db", "AUTOKERNEL_LLM_API_KEY": "k", "OPENAI_API_KEY": "k",
                             "AWS_SECRET_ACCESS_KEY": "k", "HF_TOKEN": "k", "SSH_AUTH_SOCK": "/s", "GITHUB_TOKEN": "k"})
    assert {k: env[k] for k in ("PATH", "CUDA_HOME", "TRITON_INTERPRET", "AUTOKERNEL_DB")} == {
        "PATH": "/usr/bin", "CUDA_HOME": "/opt/cuda", "TRITON_INTERPRET": "1", "AUTOKERNEL_DB": "/x.db"}
    assert not {"HOME", "AUTOKERNEL_LLM_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN",
                "SSH_AUTH_SOCK", "GITHUB_TOKEN"} & set(env)
    # the caches stay the user's across workers (the worker's own HOME is its scratch folder)
    assert (env["TRITON_CACHE_DIR"], env["AUTOKERNEL_CACHE_DIR"], env["XDG_CACHE_HOME"]) == (
        "/home/u/.triton/cache", "/home/u/.cache/autokernel", "/home/u/.cache")


def test_doctor_prints_each_protection_and_the_summary(machine):
    r = subprocess.run([sys.executable, "-m", "autokernel.engine.cli", "doctor", "--device", "cpu"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for (rule, layer), p in machine.items():
        assert any(ln.split()[:3] == [rule, layer, "on" if p.active else "off"] for ln in lines), (rule, layer, r.stdout)
    assert sandbox.summary(list(machine.values())) in lines
    assert any(ln.split()[:2] == ["reads", "landlock"] for ln in lines), r.stdout


def test_on_cuda_the_audit_hook_lets_the_compilers_run_and_nothing_else():
    """CUDA workers keep fork and exec for Triton's ptxas and cc and torch's ninja/nvcc builds; the hook (called
    here as Python's audit machinery calls it) refuses a shell or any other program started from Python."""
    hook = sandbox.AuditHook("cuda")
    for exe, argv in [("/opt/triton/backends/nvidia/bin/ptxas", ["ptxas", "-v"]), (None, ["ninja", "-v"]),
                      (None, ["/usr/local/cuda/bin/nvcc", "--version"]), ("/usr/bin/gcc", ["gcc", "launcher.c"]),
                      (None, ["/sbin/ldconfig", "-p"])]:
        hook("subprocess.Popen", (exe, argv, None, None))
    for event, args in [("subprocess.Popen", (None, ["sh", "-c", "curl x"], None, None)),
                        ("subprocess.Popen", (None, "nvcc --version; rm -rf ~", None, None)),
                        ("subprocess.Popen", ("/usr/bin/python3", ["python3", "-c", "..."], None, None)),
                        ("os.system", ("nvcc --version",)), ("os.exec", ("/bin/bash", ["bash"], None)),
                        ("os.posix_spawn", ("/usr/bin/curl", ["curl"], None)), ("os.fork", ())]:
        with pytest.raises(PermissionError, match="the worker's sandbox allows no new processes"):
            hook(event, args)
    with pytest.raises(PermissionError, match="allows no network"):
        hook("socket.__new__", (None, socket.AF_INET6, socket.SOCK_STREAM, 0))
    hook("socket.__new__", (None, socket.AF_UNIX, socket.SOCK_STREAM, 0))  # CUDA's driver talks to a UNIX socket


# -- the integration subprocess: kept kernels (and a whole ModelNew) run outside a worker -----------------------

TINY_MODEL = """
import torch
from autokernel.engine.examples.llama import RMSNorm
class Model(torch.nn.Sequential):
    def __init__(self):
        super().__init__(RMSNorm(16), torch.nn.Tanh())
def get_inputs():
    return [torch.randn(2, 3, 16)]
"""


def integrate_rmsnorm(source: str, tmp_path: Path, home: Path, monkeypatch, confined: bool, compile: bool = False):
    """A kept rmsnorm kernel integrated into a tiny model by the engine's own `integrate_session_kernels`, with the
    engine's HOME holding the key; not `confined`: the control, its subprocess started with the engine's whole
    environment and the sandbox off."""
    from autokernel.engine import integrate

    tmp_path.mkdir(exist_ok=True)
    model = tmp_path / "tiny.py"
    model.write_text(TINY_MODEL)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    if not confined:
        monkeypatch.setenv("AUTOKERNEL_SANDBOX", "off")
        popen = subprocess.Popen

        def open_popen(cmd, **kw):
            kw["env"] = {**os.environ, **{k: v for k, v in kw["env"].items() if k == "TRITON_INTERPRET"}}
            return popen(cmd, **kw)

        monkeypatch.setattr(integrate.subprocess, "Popen", open_popen)
    kernels = [{"kind": "rmsnorm", "candidate_id": "rmsnorm-0001", "source": source, "dtype": "fp32"}]
    return integrate.integrate_session_kernels(str(model), "cpu", kernels, tmp_path / "work", trials=1,
                                               timeout_s=240, compile=compile)


def test_the_integration_child_is_held_like_a_worker(machine, server, home, tmp_path, monkeypatch):
    """A kept kernel's module tries every way out when the integration imports it: confined, each is refused;
    with the engine's environment and the sandbox off, each succeeds (so this test can fail)."""
    for rule, layer in (("reads", "landlock"), ("writes", "landlock"), ("network", "netns")):
        need(machine, rule, layer)
    homefile, marker = home / "planted-by-integration", tmp_path / "shell-ran"
    source = fill(tmp_path, "integration_attacks.py", KEYFILE=home / ".ssh" / "id_rsa", HOMEFILE=homefile,
                  PORT=server.port, MARKER=marker).read_text()
    before = server.connections
    held = integrate_rmsnorm(source, tmp_path / "held", home, monkeypatch, confined=True)
    assert "outcomes read=refused write=refused connect=refused shell=refused env=refused" in held.detail, held.detail
    assert server.connections == before and not homefile.exists() and not marker.exists()
    monkeypatch.undo()
    open_door = integrate_rmsnorm(source, tmp_path / "open", home, monkeypatch, confined=False)
    assert "outcomes read=done write=done connect=done shell=done env=done" in open_door.detail, open_door.detail
    assert server.connections == before + 1 and homefile.exists() and marker.exists()


def test_a_child_with_threads_running_is_not_confined_by_halves():
    """Landlock and seccomp hold the calling thread and its future children only: a thread started before would
    stay open, so confine_process refuses to run after one."""
    code = ("import threading, time; from autokernel.engine import sandbox; "
            "threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); sandbox.confine_process('cpu')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=sandbox.child_env())
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        "RuntimeError: confine_process: the process already runs 2 threads, which would stay unconfined"), r.stderr


def test_an_honest_integration_runs_confined(machine, home, tmp_path, monkeypatch):
    """The kept kernel, the model and Triton's interpreter under every layer of the confined child (its
    torch.compile forwards, left out here for time, are tests/test_integrate.py's once the child is confined)."""
    need(machine, "reads", "landlock")
    source = (Path(__file__).parent / "data" / "triton_rmsnorm.py").read_text()
    result = integrate_rmsnorm(source, tmp_path, home, monkeypatch, confined=True)
    assert result.correct and result.model_ms > 0 and result.eager_ms > 0, result.detail
    (rmsnorm,) = result.replaced
    assert rmsnorm["calls"] > 0 and not rmsnorm["mismatches"]
