"""Errors a user can cause, and warnings; the CLI prints each as one line.

An error stops the command with a non-zero exit; a warning (on stderr, so stdout stays the
result) tells of something that may make a result misleading but does not stop it.
"""

import sys
from typing import Callable


class FbnasError(Exception):
    """A problem with the user's input or environment, reported without a traceback."""

    exit_code = 1


class UsageError(FbnasError):
    """Bad arguments or a bad config value (exit code 2, like click's usage errors)."""

    exit_code = 2


#: where warnings go: a function given one line of text
Warn = Callable[[str], None]


def warn_stderr(msg: str) -> None:
    """Default warning sink: one line on stderr, so stdout stays the result."""
    print(f"warning: {msg}", file=sys.stderr, flush=True)
