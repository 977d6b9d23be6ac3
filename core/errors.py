"""Errors that stop start-up with one plain line for the person running the server."""


class StartupError(Exception):
    """Start-up cannot go on; `str(error)` is the whole message shown to the user, no traceback."""
