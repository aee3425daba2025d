"""The worker's confinement by the operating system, so a candidate cannot touch what it has no business touching.

The static checks (`harness.static_refusal`) read a candidate's source; what the source hides (a name built
at run time, a libc call through ctypes) meets these layers instead, each applied where the machine has it
and reported either way (`autokernel doctor`, the session log):

- environment: the worker gets only what it needs (PATH, CUDA_*, TRITON_*, TORCH_*, AUTOKERNEL_*, ...), never a
  variable that looks like a key, HOME and TMPDIR point at a scratch folder of its own, and it holds no
  capabilities, so the engine's environment in /proc is out of its reach too;
- network: a network namespace of its own (nothing but a loopback that is down), seccomp refusing socket() for
  internet families, and Landlock (ABI 4+) refusing TCP connect and bind;
- writes: Landlock lets the worker write only its scratch folder, the compile caches and device files; it also
  keeps the worker from signalling or tracing processes outside it (the engine's included);
- processes: on CPU seccomp refuses fork and exec once the worker has started (nothing there compiles through a
  subprocess); on CUDA, Triton's ptxas and torch's extension builds need them, so only a Python-level spawn of
  anything but a compiler tool is refused (an audit hook), and every child inherits the layers above.

Every layer is inherited by the worker's children and cannot be lifted by them. AUTOKERNEL_SANDBOX=off turns the
operating-system layers off (a machine where they break the device); the environment is scrubbed regardless.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ENV_KEEP = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "CC", "CXX", "CFLAGS",
                      "CXXFLAGS", "LDFLAGS", "CPATH", "LIBRARY_PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV",
                      "CONDA_PREFIX", "MAX_JOBS", "XDG_CACHE_HOME", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE"})
ENV_KEEP_PREFIXES = ("CUDA_", "NVIDIA_", "TRITON_", "TORCH", "PYTORCH_", "AUTOKERNEL_", "OMP_", "MKL_", "KMP_",
                     "LC_", "CUBLAS", "CUDNN", "NVCC_")
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|COOKIE|AUTH", re.I)

# Executables a CUDA worker may start from Python: what Triton and torch's extension builds run.
TOOLS = re.compile(r"^(ptxas[\w.-]*|nvcc|ninja|ldconfig(\.real)?|nvdisasm|cuobjdump|fatbinary|nvlink|cicc|"
                   r"([\w.-]+-)?(c\+\+|g\+\+|gcc|cc|clang\+\+|clang)(-[\d.]+)?)$")

SCRATCH_PREFIX = "autokernel-sandbox-"
RULES = ("environment", "network", "writes", "processes")
ACTIVE: list["Protection"] = []  # the layers this process applied (the worker's)
REFUSED = ("refused by the worker's sandbox: a candidate gets no network, no new processes, no other process's data "
           "and no writes outside its scratch folder")


@dataclass
class Protection:
    """One layer, as `autokernel doctor` prints it: whether it is on here, and how (or why not)."""

    rule: str  # environment | network | writes | processes
    layer: str
    active: bool
    how: str

    def line(self) -> str:
        return f"{self.rule:<12} {self.layer:<10} {'on ' if self.active else 'off'}  {self.how}"


def disabled() -> bool:
    return os.environ.get("AUTOKERNEL_SANDBOX", "").strip().lower() in ("off", "0", "no", "false")


# -- the engine's side: the worker's environment ----------------------------------------------------

def child_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker starts with: what the device, the compilers and autokernel read, without any
    variable that looks like a credential, and with the compile caches pinned where they were (the worker's
    own HOME is a scratch folder, so their defaults under HOME would be lost with each worker)."""
    src = dict(os.environ if environ is None else environ)
    env = {k: v for k, v in src.items()
           if (k in ENV_KEEP or k.startswith(ENV_KEEP_PREFIXES)) and not SECRET.search(k)}
    home = Path(src.get("HOME") or Path.home())
    # The device's measured ceilings are read from here (the worker may not write it: it measures again instead).
    env.setdefault("AUTOKERNEL_CACHE_DIR", str(home / ".cache" / "autokernel"))
    env.setdefault("TRITON_CACHE_DIR", str(Path(src.get("TRITON_HOME") or home) / ".triton" / "cache"))
    env.setdefault("XDG_CACHE_HOME", str(home / ".cache"))  # torch's extension builds: ~/.cache/torch_extensions/pyXY_cuZ
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"torchinductor_{_user()}"))
    return env


def _user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:
        return str(os.getuid())


# -- the worker's side ---------------------------------------------------------------------------

def make_scratch() -> Path:
    """The worker's own folder (HOME and TMPDIR point here), after removing those of workers that died."""
    base = Path(tempfile.gettempdir())
    for old in base.glob(f"{SCRATCH_PREFIX}*"):
        pid = old.name[len(SCRATCH_PREFIX):].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():  # its worker is gone
            shutil.rmtree(old, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base))
    os.environ["HOME"] = os.environ["TMPDIR"] = str(scratch)
    # Inductor (the torch.compile baseline) compiles in this process, not in a pool of Python subprocesses
    # that the process rule would refuse.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    return scratch


def confine(scratch: Path, device: str) -> list[Protection]:
    """The layers applied before anything is imported (the worker has one thread): the environment check,
    the network and the writable paths. Each one the machine lacks is reported off, never an error."""
    env = Protection("environment", "scrub", True, "no credential variables; HOME and TMPDIR at its own scratch folder")
    leaked = sorted(k for k in os.environ if SECRET.search(k))
    if leaked:
        env = Protection("environment", "scrub", False, f"the worker was started with {', '.join(leaked[:3])}")
    if disabled():
        found = [env] + [Protection(r, "-", False, "AUTOKERNEL_SANDBOX=off") for r in RULES[1:]]
    else:
        found = [env, _own_network(), _seccomp_network(device), _landlock(scratch, device), _drop_capabilities()]
    ACTIVE.extend(found)
    return found


def forbid_processes(device: str) -> list[Protection]:
    """Applied once the worker has started its threads and built what it needs, before any candidate."""
    if disabled():
        return []
    found = _audit(device)
    if device != "cpu":
        found.append(Protection("processes", "seccomp", False, "the compilers (ptxas, nvcc, ninja) run as "
                                "subprocesses on CUDA; they and any child inherit the other layers"))
    else:
        found.append(_seccomp_processes())
    ACTIVE.extend(found)
    return found


def summary(protections: list[Protection]) -> str:
    """One line: each rule with the layers that hold it here."""
    parts = []
    for rule in RULES:
        on = [p.layer for p in protections if p.rule == rule and p.active]
        parts.append(f"{rule} {'+'.join(on) if on else 'OPEN'}")
    return "sandbox: " + ", ".join(parts)


def explain(e: BaseException) -> str:
    """A suffix for a candidate's exception that the sandbox caused: ' (refused by ...)', else ''."""
    if isinstance(e, OSError) and e.errno in (errno.EPERM, errno.EACCES, errno.ENETUNREACH) \
            and any(p.active and p.layer != "scrub" for p in ACTIVE) and "sandbox" not in str(e):
        return f" ({REFUSED})"
    return ""


# -- network ---------------------------------------------------------------------------------------

CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _own_network() -> Protection:
    """A new network namespace: as root directly, else inside a new user namespace mapping the same ids."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNET) == 0:
        return Protection("network", "netns", True, "a network namespace of its own (loopback down)")
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return Protection("network", "netns", False, f"unshare: {os.strerror(ctypes.get_errno())}")
    try:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    except OSError as e:
        return Protection("network", "netns", True, f"a network namespace in a user namespace (ids unmapped: {e})")
    return Protection("network", "netns", True, "a network namespace of its own, in a user namespace")


def _seccomp():
    import pyseccomp  # finds libseccomp through ldconfig: imported before processes are refused

    return pyseccomp


def _seccomp_network(device: str) -> Protection:
    families = [socket.AF_INET, socket.AF_INET6, socket.AF_PACKET]
    if device == "cpu":  # a path socket (a container runtime's) is as good as a network; CUDA's driver uses one
        families.append(socket.AF_UNIX)
    try:
        sc = _seccomp()
        f = sc.SyscallFilter(sc.ALLOW)
        for fam in families:
            f.add_rule(sc.ERRNO(errno.EACCES), "socket", sc.Arg(0, sc.EQ, int(fam)))
        f.load()
    except Exception as e:
        return Protection("network", "seccomp", False, f"not applied: {type(e).__name__}: {e}")
    names = "/".join(socket.AddressFamily(f).name.removeprefix("AF_") for f in families)
    return Protection("network", "seccomp", True, f"socket() refused for {names}")


# -- writes (Landlock) -----------------------------------------------------------------------------

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same number on every architecture
_PR_SET_NO_NEW_PRIVS = 38
_WRITE_FILE, _TRUNCATE = 1 << 1, 1 << 14
_DIR_WRITES = sum(1 << b for b in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
_REFER = 1 << 13
_NET_TCP = 1 | 2  # bind, connect
_SCOPES = 1 | 2  # abstract unix sockets, signals


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    return int(libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def writable_paths(scratch: Path, device: str = "cpu") -> list[Path]:
    """Where the worker may write: its scratch folder, the compile caches the engine pinned, shared memory
    and whatever AUTOKERNEL_SANDBOX_WRITABLE adds (paths separated by os.pathsep). On CUDA also /proc and
    /sys: the driver writes there while it initialises (without them cudaGetDeviceCount fails with error
    304); with every capability dropped, what a process may write there is only its own."""
    out = [scratch, Path("/dev/shm")] + ([Path("/proc"), Path("/sys")] if device == "cuda" else [])
    for var in ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        if os.environ.get(var):
            out.append(Path(os.environ[var]))
    if os.environ.get("XDG_CACHE_HOME") and not os.environ.get("TORCH_EXTENSIONS_DIR"):
        out.append(Path(os.environ["XDG_CACHE_HOME"]) / "torch_extensions")
    out += [Path(p) for p in os.environ.get("AUTOKERNEL_SANDBOX_WRITABLE", "").split(os.pathsep) if p]
    for p in out:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
    return [p for p in out if p.is_dir()]


def _landlock(scratch: Path, device: str = "cpu") -> Protection:
    abi = landlock_abi()
    if abi < 1:
        return Protection("writes", "landlock", False, f"not in this kernel ({os.strerror(ctypes.get_errno())})")
    fs = _WRITE_FILE | _DIR_WRITES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    net = _NET_TCP if abi >= 4 else 0
    scoped = _SCOPES if abi >= 6 else 0
    attr = (ctypes.c_uint64 * 3)(fs, net, scoped)
    size = 8 * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        return Protection("writes", "landlock", False, f"ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        paths = writable_paths(scratch, device)
        rules = [(p, fs) for p in paths] + [(Path("/dev"), _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0))]
        for path, access in rules:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(access, pfd)
                if libc.syscall(_ADD_RULE, fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    return Protection("writes", "landlock", False, f"rule for {path}: {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(_RESTRICT_SELF, fd, 0) != 0:
            return Protection("writes", "landlock", False, f"restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    extra = (", TCP connect/bind refused" if net else "") + (", no signals or ptrace out of it" if scoped else "")
    return Protection("writes", "landlock", True,
                      f"ABI {abi}: writes only to its scratch folder, "
                      f"{', '.join(str(p) for p in paths if p != scratch)} and /dev{extra}")


# -- capabilities ----------------------------------------------------------------------------------

class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> Protection:
    """No capabilities left (a root worker's included): the kernel then refuses it another process's /proc
    (the engine's environment holds the keys), and files only their mode bits allow."""
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3, all zero
    if _libc().capset(ctypes.byref(header), data) != 0:
        return Protection("environment", "caps", False, f"capset: {os.strerror(ctypes.get_errno())}")
    return Protection("environment", "caps", True, "no capabilities: other processes' /proc (the engine's "
                      "environment) out of reach")


# -- processes ---------------------------------------------------------------------------------------

CLONE_THREAD = 0x00010000


def _seccomp_processes() -> Protection:
    """fork/vfork/clone of a process, clone3 (glibc then falls back to clone, for threads), execve(at)."""
    try:
        sc = _seccomp()
        f = sc.SyscallFilter(sc.ALLOW)
        f.set_attr(sc.Attr.CTL_TSYNC, 1)  # every thread the worker has started, not only this one
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for name in ("fork", "vfork", "execve", "execveat"):
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        f.load()
    except Exception as e:
        return Protection("processes", "seccomp", False, f"not applied: {type(e).__name__}: {e}")
    return Protection("processes", "seccomp", True, "fork, clone of a process and exec refused")


def _audit(device: str) -> list[Protection]:
    """An audit hook: a one-line reason for an internet socket or a spawn made from Python (the kernel's
    EPERM says little), and on CUDA the only guard that tells a compiler from a shell."""
    sys.addaudithook(AuditHook(device))
    allowed = "none" if device == "cpu" else "the compiler tools"
    return [Protection("network", "audit", True, "internet sockets from Python refused"),
            Protection("processes", "audit", True, f"spawns from Python refused (allowed: {allowed})")]


class AuditHook:
    EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty")

    def __init__(self, device: str):
        self.device = device

    def __call__(self, event: str, args: tuple) -> None:
        if event == "socket.__new__" and len(args) > 1 and args[1] in (socket.AF_INET, socket.AF_INET6):
            raise PermissionError(errno.EACCES, "the worker's sandbox allows no network")
        if event not in self.EVENTS:
            return
        what = self._program(event, args)
        if self.device != "cpu" and what and event != "os.system" and TOOLS.match(Path(what).name):
            return
        raise PermissionError(errno.EPERM, f"the worker's sandbox allows no new processes ({event} {what})".strip())

    @staticmethod
    def _program(event: str, args: tuple) -> str:
        if event == "subprocess.Popen":
            exe, argv = args[0], args[1]
            if exe:
                return str(exe)
            if isinstance(argv, (str, bytes)):
                return "a shell"
            return str(list(argv)[0]) if argv else ""
        if event == "os.system":
            return "a shell"
        if event in ("os.exec", "os.posix_spawn"):
            return str(args[0])
        if event == "os.spawn":
            return str(args[1])
        return ""


def probe(device: str = "cpu") -> list[Protection]:
    """What a worker on `device` gets on this machine: a child applies every layer and reports it."""
    cmd = [sys.executable, "-c", "import sys; from autokernel.engine.sandbox import _report; _report(sys.argv[1])", device]
    done = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=60)
    rows = [line.split("\t") for line in done.stdout.splitlines() if line.count("\t") == 3]
    if done.returncode != 0 or not rows:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [Protection(r, "-", False, f"the probe failed: {tail}") for r in RULES]
    found = [Protection(r, layer, active == "1", how) for r, layer, active, how in rows]
    return sorted(found, key=lambda p: RULES.index(p.rule) if p.rule in RULES else len(RULES))


def _report(device: str) -> None:
    """The probe's child: the worker's own sequence, without torch."""
    scratch = make_scratch()
    try:
        found = confine(scratch, device) + forbid_processes(device)
        for p in found:
            print(f"{p.rule}\t{p.layer}\t{int(p.active)}\t{p.how}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
