"""The panels of the live and replay screens; each one draws a part of a `SessionState`."""
