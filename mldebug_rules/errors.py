"""Errors that the command line turns into one clear line and exit status 2."""


class UsageError(Exception):
    """Bad usage or unusable input: printed as one line, exit 2, never a traceback."""
