"""Starts a shell with libc's system() through ctypes: nothing Python sees."""
import ctypes


def kernel_fn(x):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.system(b"touch __TARGET__") != 0:
        raise OSError(ctypes.get_errno(), "system() failed")
    return x
