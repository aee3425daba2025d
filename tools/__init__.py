"""Developer tools for the TUI: a synthetic session, the screenshot maker and the UI benchmark.

They are not part of the installed package (users never need them); run them from the repository
root, e.g. `python -m tools.bench_ui`, and the tests import them from there.
"""
