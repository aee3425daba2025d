"""Opens a TCP connection through the socket module the worker already loaded, so no import names it."""
import sys


def kernel_fn(x):
    net = sys.modules["socket"]
    net.create_connection(("127.0.0.1", __PORT__), timeout=5).sendall(b"stolen")
    return x
