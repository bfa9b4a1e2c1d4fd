"""Progress reporting: a tqdm bar on a terminal, occasional plain lines otherwise."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    """Counts done/total with an ETA; silent when ``enabled`` is False."""

    def __init__(self, total: int, desc: str, enabled: bool = True, interval: float = 10.0):
        self.total = total
        self.done = 0
        self.desc = desc
        self.enabled = enabled
        self.start = time.monotonic()
        self.tty = enabled and sys.stderr.isatty()
        self.bar = tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True) if self.tty else None
        self.interval = interval
        self.last_line = self.start

    def add(self, n: int) -> None:
        """Grow the total (for work discovered on the way, such as re-measurements)."""
        self.total += n
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and (time.monotonic() - self.last_line >= self.interval
                               or self.done == self.total):
            self.last_line = time.monotonic()
            elapsed = self.last_line - self.start
            eta = elapsed / self.done * (self.total - self.done)
            print(f"{self.desc}: {self.done}/{self.total} done, {elapsed:.0f}s elapsed, "
                  f"ETA {eta:.0f}s", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
