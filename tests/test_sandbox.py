"""Candidates that reach out of their worker (tests/sandbox_candidates/): a socket, a write to the user's home, a
key in the environment, a shell. Each comes twice or three times: in plain sight (the static check refuses it
before import), hidden from the static check (the worker's audit hook, its scrubbed environment or HOME), and
through libc with ctypes (only the kernel's layers see it: network namespace, seccomp, Landlock). Every test
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


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("home")


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
def worker(home):
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
    assert str(home) not in detail and not (home / ".ssh").exists()


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
    for name in ("net_libc.py", "home_write.py", "shell_libc.py", "env_parent.py"):
        refusal(worker, fill(tmp_path, name, PORT=server.port, TARGET=home / "planted"))
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
    finally:
        w.close()
        mp.undo()
    assert server.connections == before + 1
    assert target.exists() and marker.exists()
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
