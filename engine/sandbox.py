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
- reads: a second Landlock layer lets it read (and execute) only what Python, torch, Triton, CUDA and the compilers
  need (the system folders, Python's prefixes and sys.path, the folders of its loaded libraries, the compile
  caches), the temporary folder, and the files the engine will hand it; nothing else of the user's home;
- processes: on CPU seccomp refuses fork and exec once the worker has started (nothing there compiles through a
  subprocess); on CUDA, Triton's ptxas and torch's extension builds need them, so only a Python-level spawn of
  anything but a compiler tool is refused (an audit hook), and every child inherits the layers above.

Every layer is inherited by the worker's children and cannot be lifted by them. AUTOKERNEL_SANDBOX=off turns the
operating-system layers off (a machine where they break the device); the environment is scrubbed regardless.
Another child that runs kept or LLM-written code (the integration) starts with `child_env(readable, writable)`
and calls `confine_process(device)` first thing: the same layers, with the compilers allowed as on CUDA.
"""

from __future__ import annotations

import atexit
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

# What torch.compile's Inductor starts besides the compilers (on the CPU: a Python child that loads what it built,
# a hash of a precompiled header), allowed in a child that compiles whole models (`confine_process`).
COMPILE_PROGRAMS = (sys.executable, "openssl")

SCRATCH_PREFIX = "autokernel-sandbox-"
RULES = ("environment", "network", "writes", "reads", "processes")
ACTIVE: list["Protection"] = []  # the layers this process applied (the worker's)
REFUSED = ("refused by the worker's sandbox: a candidate gets no network, no new processes, no other process's data, "
           "no writes outside its scratch folder and no reads of the user's files")
# Set by child_env for the child: files and folders it may also read or write (os.pathsep-separated), and the
# homes its own HOME (a scratch folder) no longer names.
READABLE_VAR, WRITABLE_VAR = "AUTOKERNEL_SANDBOX_READABLE", "AUTOKERNEL_SANDBOX_WRITABLE"
HOMES_VAR = "AUTOKERNEL_SANDBOX_HOMES"
_declared: list[str] = []  # the engine's side: what allow_read() named


@dataclass
class Protection:
    """One layer, as `autokernel doctor` prints it: whether it is on here, and how (or why not)."""

    rule: str  # environment | network | writes | reads | processes
    layer: str
    active: bool
    how: str

    def line(self) -> str:
        return f"{self.rule:<12} {self.layer:<10} {'on ' if self.active else 'off'}  {self.how}"


def disabled() -> bool:
    return os.environ.get("AUTOKERNEL_SANDBOX", "").strip().lower() in ("off", "0", "no", "false")


# -- the engine's side: the worker's environment ----------------------------------------------------

def child_env(environ: dict[str, str] | None = None, readable: list | tuple = (),
              writable: list | tuple = ()) -> dict[str, str]:
    """The environment a worker starts with: what the device, the compilers and autokernel read, without any
    variable that looks like a credential, and with the compile caches pinned where they were (the worker's
    own HOME is a scratch folder, so their defaults under HOME would be lost with each worker).

    It also tells the child's read layer what to spare and what to keep out: `readable` (a file's folder, or a
    folder) with the paths the user named on the engine's command line and those `allow_read` declared, since
    the child is confined before it is handed them; `writable` folders besides its scratch; the user's home."""
    src = dict(os.environ if environ is None else environ)
    env = {k: v for k, v in src.items()
           if (k in ENV_KEEP or k.startswith(ENV_KEEP_PREFIXES)) and not SECRET.search(k)}
    home = Path(src.get("HOME") or Path.home())
    env[HOMES_VAR] = os.pathsep.join(dict.fromkeys(str(h) for h in [home, *_account_home()]))
    named = [str(Path(p).expanduser().absolute()) for p in [*readable, *_declared, *_named_on_command_line()]]
    for var, extra in ((READABLE_VAR, named), (WRITABLE_VAR, [str(Path(p).absolute()) for p in writable])):
        joined = [p for p in [*src.get(var, "").split(os.pathsep), *extra] if p]
        if joined:
            env[var] = os.pathsep.join(dict.fromkeys(joined))
    # The device's measured ceilings are read from here (the worker may not write it: it measures again instead).
    env.setdefault("AUTOKERNEL_CACHE_DIR", str(home / ".cache" / "autokernel"))
    env.setdefault("TRITON_CACHE_DIR", str(Path(src.get("TRITON_HOME") or home) / ".triton" / "cache"))
    env.setdefault("XDG_CACHE_HOME", str(home / ".cache"))  # torch's extension builds: ~/.cache/torch_extensions/pyXY_cuZ
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"torchinductor_{_user()}"))
    return env


def allow_read(*paths: str | Path) -> None:
    """The engine's side: a file (its folder) or folder the workers started from now on will be handed, such as
    the model of a resumed session, which is not on the command line."""
    _declared.extend(str(Path(p).expanduser().absolute()) for p in paths)


def _named_on_command_line() -> list[str]:
    """The files and folders the user named to the engine (`autokernel check ~/k/cand.py`, a model, problems)."""
    out = []
    for arg in sys.argv[1:]:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        try:
            if value and not value.startswith("-") and Path(value).expanduser().exists():
                out.append(str(Path(value).expanduser().absolute()))
        except OSError:
            pass
    return out


def _account_home() -> list[str]:
    """The home the password database gives this user, whatever HOME says."""
    try:
        import pwd

        return [pwd.getpwuid(os.getuid()).pw_dir]
    except (ImportError, KeyError):
        return []


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
    the network, the writable paths and the readable ones. Each one the machine lacks is reported off, never an
    error."""
    env = Protection("environment", "scrub", True, "no credential variables; HOME and TMPDIR at its own scratch folder")
    leaked = sorted(k for k in os.environ if SECRET.search(k))
    if leaked:
        env = Protection("environment", "scrub", False, f"the worker was started with {', '.join(leaked[:3])}")
    if disabled():
        found = [env] + [Protection(r, "-", False, "AUTOKERNEL_SANDBOX=off") for r in RULES[1:]]
    else:
        found = [env, _own_network(), _seccomp_network(device), _landlock(scratch, device),
                 _landlock_reads(scratch, device), _drop_capabilities()]
    ACTIVE.extend(found)
    return found


def forbid_processes(device: str, compilers: bool | None = None, programs: tuple[str, ...] = ()) -> list[Protection]:
    """Applied once the worker has started its threads and built what it needs, before any candidate.
    `compilers` (by default on CUDA only): the compiler tools, and the executables `programs` names, may still be
    started from Python, so the kernel's process filter stays off."""
    if disabled():
        return []
    compilers = device != "cpu" if compilers is None else compilers
    found = _audit(device, compilers, programs)
    if compilers:
        found.append(Protection("processes", "seccomp", False, "the compilers (ptxas, nvcc, ninja, cc) run as "
                                "subprocesses here; they and any child inherit the other layers"))
    else:
        found.append(_seccomp_processes())
    ACTIVE.extend(found)
    return found


def confine_process(device: str) -> list[Protection]:
    """The first thing a child that runs kept or LLM-written code outside a worker (the integration) does, the
    engine having started it with `child_env(readable=[...], writable=[...])`: a scratch folder of its own, every
    layer of the worker's, and processes as on a CUDA worker, this Python included: torch.compile's Inductor runs
    the C++ compiler on the CPU too, and probes what it built in a Python child. Those children hold the same
    layers. The scratch folder goes when the process exits. It must run while the process has one thread: the
    kernel confines the calling thread and its future children, never a thread already running."""
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:
        raise RuntimeError(f"confine_process: the process already runs {threads} threads, which would stay unconfined")
    scratch = make_scratch()
    atexit.register(shutil.rmtree, scratch, True)
    return confine(scratch, device) + forbid_processes(device, compilers=True, programs=COMPILE_PROGRAMS)


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
    out += [Path(p) for p in os.environ.get(WRITABLE_VAR, "").split(os.pathsep) if p]
    for p in out:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
    return [p for p in out if p.is_dir()]


def _restrict(handled: list[int], rules: list[tuple[Path, int]]) -> str:
    """One Landlock layer on this process: `handled` (fs, net, scoped: as many as the ABI knows) is refused
    except beneath each rule's path; '' once applied, else why not."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = (ctypes.c_uint64 * len(handled))(*handled)
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8 * len(handled)), ctypes.c_uint32(0))
    if fd < 0:
        return f"ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        for path, access in rules:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:  # gone since it was listed (a shared temporary folder): nothing to allow
                continue
            except OSError as e:
                return f"rule for {path}: {e.strerror}"
            try:
                rule = _PathBeneath(access, pfd)
                if libc.syscall(_ADD_RULE, fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    return f"rule for {path}: {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(_RESTRICT_SELF, fd, 0) != 0:
            return f"restrict_self: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(fd)
    return ""


def _landlock(scratch: Path, device: str = "cpu") -> Protection:
    abi = landlock_abi()
    if abi < 1:
        return Protection("writes", "landlock", False, f"not in this kernel ({os.strerror(ctypes.get_errno())})")
    fs = _WRITE_FILE | _DIR_WRITES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    net = _NET_TCP if abi >= 4 else 0
    scoped = _SCOPES if abi >= 6 else 0
    handled = [fs, net, scoped][:3 if abi >= 6 else 2 if abi >= 4 else 1]
    paths = writable_paths(scratch, device)
    why = _restrict(handled, [(p, fs) for p in paths] + [(Path("/dev"), _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0))])
    if why:
        return Protection("writes", "landlock", False, why)
    extra = (", TCP connect/bind refused" if net else "") + (", no signals or ptrace out of it" if scoped else "")
    return Protection("writes", "landlock", True,
                      f"ABI {abi}: writes only to its scratch folder, "
                      f"{', '.join(str(p) for p in paths if p != scratch)} and /dev{extra}")


# -- reads (Landlock) ------------------------------------------------------------------------------

_EXECUTE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 2, 1 << 3
# The file-system hierarchy's system folders (those this machine has): the interpreter, the C and CUDA libraries,
# the compilers and their headers, the loader's cache, the kernel's views. Its own places are derived below.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys",
                  "/dev")
# The variables (kept by child_env) whose values are where the device's libraries, tools and caches are.
PATH_LISTS = ("PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "PYTHONPATH")
PATH_PREFIXES = ("CUDA_", "NVIDIA_", "TRITON_", "TORCH", "PYTORCH_", "CUDNN", "CUBLAS", "NVCC_")
PATH_VARS = ("VIRTUAL_ENV", "CONDA_PREFIX", "CC", "CXX", "AUTOKERNEL_CACHE_DIR")
MAX_READ_RULES = 8192


def homes() -> list[Path]:
    """The user's homes, resolved: the engine's HOME (passed as AUTOKERNEL_SANDBOX_HOMES, since the child's own
    HOME is its scratch folder) and the password database's; never the root folder."""
    out: list[Path] = []
    for h in [*os.environ.get(HOMES_VAR, "").split(os.pathsep), *_account_home()]:
        if not h:
            continue
        r = Path(h).resolve()
        if r != Path(r.anchor) and r.is_dir() and r not in out:
            out.append(r)
    return out


def readable_paths(scratch: Path, device: str = "cpu") -> list[tuple[Path, bool]]:
    """Where the child may read and execute, as (path, is a folder): the system folders (and /run on CUDA, for the
    driver's daemons), the temporary folder holding its scratch folder, the folders it may write, Python's
    prefixes, install paths and sys.path, the packages on editable finders (autokernel's own), the folders of the
    libraries it has loaded, the paths the device's variables name, and the files or folders the engine named
    (AUTOKERNEL_SANDBOX_READABLE: a file stands for its folder). A folder that is a home is left out; one that
    holds a home is spared entry by entry as it is now, the home's branch excepted; a file named inside a
    home's own top folder is spared alone."""
    import sysconfig

    folders = [Path(p) for p in SYSTEM_FOLDERS] + ([Path("/run")] if device == "cuda" else [])
    folders += [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)]
    folders += [Path(p) for p in sysconfig.get_paths().values()]
    folders += [Path(p or os.getcwd()) for p in sys.path]
    folders += _package_folders() + _env_paths() + writable_paths(scratch, device)
    files = _mapped_files() + [Path(p) for p in os.environ.get(READABLE_VAR, "").split(os.pathsep) if p]
    protected = homes()
    rules: dict[Path, bool] = {}
    seen: set[Path] = set()
    for f in files:
        try:
            r = f.resolve()
            if r.is_file():
                parent = r.parent
                if any(parent == h or parent in h.parents for h in protected):
                    rules.setdefault(r, False)
                    continue
                r = parent
        except OSError:
            continue
        folders.append(r)
    # The temporary folder last: when it holds a home it is spared entry by entry, and a crowded one must not
    # push what the child needs to run (Python, its libraries) past the cap on rules.
    for p in [*folders, scratch.parent]:
        _spare(p, protected, rules, seen)
    return list(rules.items())[:MAX_READ_RULES]


def _spare(path: Path, protected: list[Path], rules: dict[Path, bool], seen: set[Path]) -> None:
    try:
        r = path.resolve()
        if r in seen or not r.exists():
            return
        seen.add(r)
        if not r.is_dir():
            rules.setdefault(r, False)
        elif r in protected:
            return
        elif any(r in h.parents for h in protected):  # holds a home: everything else in it, as it is now
            if len(rules) < MAX_READ_RULES:
                for child in sorted(r.iterdir()):
                    _spare(child, protected, rules, seen)
        else:
            rules.setdefault(r, True)
    except OSError:
        return


def _package_folders() -> list[Path]:
    """Where packages outside sys.path live: those of editable installs (autokernel's own, a user's package the
    model imports) and autokernel's, torch's and Triton's however they were installed."""
    import importlib.util

    out = []
    for name, module in list(sys.modules.items()):
        mapping = getattr(module, "MAPPING", None)
        if name.startswith("__editable__") and isinstance(mapping, dict):
            out += [Path(v) for v in mapping.values() if isinstance(v, str)]
    for name in ("autokernel.engine", "autokernel.kernels", "autokernel.playbook", "torch", "triton"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            out += [Path(p) for p in spec.submodule_search_locations]
    return out


def _env_paths() -> list[Path]:
    """The paths the child's variables name: its tool and library search paths, CUDA's, Triton's and torch's
    homes and caches, the compilers, the environment's prefix."""
    out = []
    for k, v in os.environ.items():
        if k in PATH_LISTS:
            out += [Path(p) for p in v.split(os.pathsep) if p.startswith("/")]
        elif (k in PATH_VARS or k.startswith(PATH_PREFIXES)) and v.startswith("/"):
            out.append(Path(v))  # a compiler named without a folder is found on PATH, spared above
    return out


def _mapped_files() -> list[Path]:
    """The files this process has mapped (the interpreter, its libraries, extension modules)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    found = {ln.split(None, 5)[5] for ln in lines if len(ln.split(None, 5)) == 6}
    return [Path(f) for f in sorted(found) if f.startswith("/") and not f.endswith("(deleted)")]


# The read layer has run the CPU suite but not yet a GPU session whole (ptxas, nvcc, the driver's caches,
# torch.compile baselines): on CUDA it is on only when asked for, so a read it forgot cannot fail every kernel.
READS_ON_CUDA = "AUTOKERNEL_SANDBOX_READS"


def _landlock_reads(scratch: Path, device: str = "cpu") -> Protection:
    if device == "cuda" and os.environ.get(READS_ON_CUDA, "").lower() not in ("1", "on", "yes"):
        return Protection("reads", "landlock", False,
                          f"not yet checked on a GPU: {READS_ON_CUDA}=on turns it on")
    abi = landlock_abi()
    if abi < 1:
        return Protection("reads", "landlock", False, f"not in this kernel ({os.strerror(ctypes.get_errno())})")
    rules = readable_paths(scratch, device)
    # A layer that does not handle REFER refuses every rename into another folder (EXDEV), and the caches
    # build each kernel in a folder of their own then rename it up. So this layer handles REFER and grants
    # it wherever it grants reads; where files may be written at all is the writes layer's to say.
    refer = _REFER if abi >= 2 else 0
    folder, file = _EXECUTE | _READ_FILE | _READ_DIR, _EXECUTE | _READ_FILE
    why = _restrict([folder | refer], [(p, folder | refer if is_dir else file) for p, is_dir in rules])
    if why:
        return Protection("reads", "landlock", False, why)
    kept_out = ", ".join(str(h) for h in homes()) or "no home"
    return Protection("reads", "landlock", True,
                      f"ABI {abi}: reads and runs only the system folders, Python's, its libraries', the caches, "
                      f"the temporary folder and what the engine hands it ({len(rules)} places); of {kept_out} "
                      "only those")


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


def _audit(device: str, compilers: bool, programs: tuple[str, ...] = ()) -> list[Protection]:
    """An audit hook: a one-line reason for an internet socket or a spawn made from Python (the kernel's
    EPERM says little), and where compilers run the only guard that tells a compiler from a shell."""
    sys.addaudithook(AuditHook(device, compilers, programs))
    allowed = " and ".join((["the compiler tools"] if compilers else []) + list(programs)) or "none"
    return [Protection("network", "audit", True, "internet sockets from Python refused"),
            Protection("processes", "audit", True, f"spawns from Python refused (allowed: {allowed})")]


class AuditHook:
    EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty")

    def __init__(self, device: str, compilers: bool | None = None, programs: tuple[str, ...] = ()):
        self.device = device
        self.compilers = device != "cpu" if compilers is None else compilers
        self.paths = {os.path.realpath(p) for p in programs if "/" in p}
        self.names = {p for p in programs if "/" not in p}

    def __call__(self, event: str, args: tuple) -> None:
        if event == "socket.__new__" and len(args) > 1 and args[1] in (socket.AF_INET, socket.AF_INET6):
            raise PermissionError(errno.EACCES, "the worker's sandbox allows no network")
        if event not in self.EVENTS:
            return
        what = self._program(event, args)
        if self.compilers and what and event != "os.system" and (TOOLS.match(Path(what).name)
                                                                 or what in self.names
                                                                 or os.path.realpath(what) in self.paths):
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


_probed: dict[tuple, list[Protection]] = {}


def probe(device: str = "cpu") -> list[Protection]:
    """What a worker on `device` gets on this machine: a child applies every layer and reports it. Asked once per
    device and worker environment in a process (each session of a TUI logs it)."""
    key = (device, tuple(sorted(child_env().items())))
    found = _probed.get(key) or _probe(device)
    if any(p.layer != "-" for p in found):  # a probe that failed is asked again next time
        _probed[key] = found
    return list(found)


def _probe(device: str) -> list[Protection]:
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
