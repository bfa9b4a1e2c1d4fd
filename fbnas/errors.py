"""Errors a user can cause, and warnings; the CLI prints each as one line.

An error stops the command with a non-zero exit; a warning (on stderr, so stdout stays the
result) tells of something that may make a result misleading but does not stop it.
"""

import re
import sys
from typing import Any, Callable

#: about the most characters of a value an error message shows
SHOWN_CHARS = 80


class FbnasError(Exception):
    """A problem with the user's input or environment, reported without a traceback."""

    exit_code = 1


class UsageError(FbnasError):
    """Bad arguments or a bad config value (exit code 2, like click's usage errors)."""

    exit_code = 2


def brief(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters with the full
    length stated: an error echoes the value it refuses, and a 50 MB string in a table made a
    52 MB "one-line" error. A long string is cut before its repr is made."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:limit - 10]!r}... ({len(value):,} {unit})"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 3]}... ({len(text):,} characters)"


#: the longest error or warning line printed, after long values in it are cut
MAX_LINE = 2000
_LONG_RUN = re.compile(r"\S{%d,}" % (2 * SHOWN_CHARS + 1))


def capped(message: str, limit: int = MAX_LINE) -> str:
    """The last resort where errors and warnings are printed, for a value echoed without
    :func:`brief`: every run of more than twice ``SHOWN_CHARS`` non-space characters is cut to
    ``SHOWN_CHARS`` with its length stated, and a line still longer than ``limit`` keeps its
    start and its end (where the fix is), with how much was left out between."""
    if len(message) <= limit:
        return message
    message = _LONG_RUN.sub(lambda m: f"{m.group()[:SHOWN_CHARS]}... ({len(m.group()):,} "
                                      "characters)", message)
    if len(message) <= limit:
        return message
    head, tail = limit * 2 // 3, limit // 3
    return (f"{message[:head]} [... {len(message) - head - tail:,} characters left out ...] "
            f"{message[-tail:]}")


#: where warnings go: a function given one line of text
Warn = Callable[[str], None]


def warn_stderr(msg: str) -> None:
    """Default warning sink: one line on stderr, so stdout stays the result."""
    print(f"warning: {capped(msg)}", file=sys.stderr, flush=True)
