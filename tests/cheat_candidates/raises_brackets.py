"""Raises an error whose message looks like rich markup (a closing tag): the CLI must print it, not crash."""


def kernel_fn(x):
    raise KeyError("no entry [/tmp/cache] for [bold]this shape")
