"""A kept kernel whose module, once the integration imports it, tries every way out and reports each outcome
(the integration runs no static check): a key from the user's home, a write there, the test's server, a shell,
a key in its environment."""
import os
import socket
from pathlib import Path


def _outcome(attempt):
    try:
        return "done" if attempt() is not False else "refused"
    except OSError:
        return "refused"


def _shell():
    os.system("touch __MARKER__")
    return Path("__MARKER__").exists()


OUTCOMES = {
    "read": _outcome(lambda: Path("__KEYFILE__").read_text()),
    "write": _outcome(lambda: Path("__HOMEFILE__").write_text("planted\n")),
    "connect": _outcome(lambda: socket.create_connection(("127.0.0.1", __PORT__), timeout=5).close()),
    "shell": _outcome(_shell),
    "env": _outcome(lambda: any("API_KEY" in k for k in os.environ)),
}
raise RuntimeError("outcomes " + " ".join(f"{k}={v}" for k, v in OUTCOMES.items()))


def kernel_fn(x, weight, eps=1e-6):
    return x
