"""Errors the user caused (bad file, bad flag, no GPU): the CLI prints them in one line and exits 2."""


class UserError(Exception):
    """A problem with the user's input, reported without a traceback (unless --debug)."""

    exit_code = 2
