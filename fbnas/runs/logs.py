"""Where the lines of a training run go: the standard ``logging`` logger "fbnas".

A run logs its set-up description, one line per epoch, warnings and the test result to the
"fbnas" logger (warnings at WARNING, the rest at INFO), so a library user silences, filters
or redirects them like any library's: ``logging.getLogger("fbnas").setLevel(logging.WARNING)``
keeps only warnings, ``propagate = False`` keeps them off the root logger's handlers. Three
handlers are fbnas's own:

- the run's ``train.log``: one FileHandler, opened once the run directory exists; lines logged
  before that (during set-up) are held and written first, so the file has every line;
- on the command line, :func:`console` prints each line as it is, on standard output;
- ``echo``: a callable that also gets every line of a run (a bench script's log file).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack, contextmanager
from logging.handlers import MemoryHandler
from pathlib import Path
from typing import Callable, Iterator

from fbnas.errors import FbnasError

LOGGER = logging.getLogger("fbnas")
#: train.log lines: a local time stamp, then the console line
FILE_FORMAT = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S")


class EchoHandler(logging.Handler):
    """Hands each line, without a time stamp or level, to a callable."""

    def __init__(self, echo: Callable[[str], None]):
        super().__init__()
        self.echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.echo(record.getMessage())
        except Exception:
            self.handleError(record)


@contextmanager
def _attached(handler: logging.Handler) -> Iterator[logging.Handler]:
    """``handler`` on the fbnas logger, which passes INFO lines unless its user set a level."""
    unset = LOGGER.level == logging.NOTSET
    if unset:
        LOGGER.setLevel(logging.INFO)
    LOGGER.addHandler(handler)
    try:
        yield handler
    finally:
        LOGGER.removeHandler(handler)
        handler.close()
        if unset:
            LOGGER.setLevel(logging.NOTSET)


@contextmanager
def console() -> Iterator[None]:
    """Print the fbnas logger's lines on standard output while a command runs."""
    import click

    with _attached(EchoHandler(click.echo)):
        yield


class RunLog:
    """The run's train.log: held in memory until :meth:`open` names the file."""

    def __init__(self) -> None:
        self.held = MemoryHandler(capacity=100_000, flushLevel=logging.CRITICAL + 1,
                                  flushOnClose=False)
        self.file: logging.FileHandler | None = None

    def open(self, path: Path) -> None:
        """Write the held lines to ``path`` and every later one as it comes."""
        try:
            self.file = logging.FileHandler(path, mode="a", encoding="utf-8")
        except OSError as e:
            raise FbnasError(f"cannot write {path}: {e.strerror or e}") from None
        self.file.setFormatter(FILE_FORMAT)
        LOGGER.addHandler(self.file)
        LOGGER.removeHandler(self.held)
        self.held.setTarget(self.file)
        self.held.flush()


@contextmanager
def run_log(echo: Callable[[str], None] | None = None) -> Iterator[RunLog]:
    """The logging of one run: train.log once opened, and ``echo`` when given."""
    log = RunLog()
    with ExitStack() as stack:
        stack.enter_context(_attached(log.held))
        if echo is not None:
            stack.enter_context(_attached(EchoHandler(echo)))
        try:
            yield log
        finally:
            if log.file is not None:
                LOGGER.removeHandler(log.file)
                log.file.close()
