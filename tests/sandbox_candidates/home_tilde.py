"""Writes to ~/.ssh through HOME, then says where the file went."""
from pathlib import Path


def kernel_fn(x):
    target = Path("~/.ssh/authorized_keys").expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("ssh-ed25519 AAAA planted\n")
    raise RuntimeError(f"wrote {target}")
