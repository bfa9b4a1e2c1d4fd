"""Errors a user can cause; the CLI prints them as one line and exits non-zero."""


class FbnasError(Exception):
    """A problem with the user's input or environment, reported without a traceback."""

    exit_code = 1


class UsageError(FbnasError):
    """Bad arguments or a bad config value (exit code 2, like click's usage errors)."""

    exit_code = 2
