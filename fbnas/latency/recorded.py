"""The lookup table recorded with a run directory or an architecture file, wherever it moved.

A run keeps a byte copy of the table it ran with, RUN_DIR/lut.json, and an architecture file
entry records the table's path and hash. Reports on an architecture (``fbnas summary``,
``fbnas latency``) and sampling from a search both need that table back after the run
directory was moved or the original re-profiled; the rules for finding it live here, below
the runs and the search that write it.
"""

from __future__ import annotations

from pathlib import Path

from fbnas.errors import Warn, warn_stderr
from fbnas.io import file_hash

#: the name of the lookup table's copy in a run directory
TABLE_COPY = "lut.json"


def table_copy(run_dir: str | Path) -> Path:
    """Where a run directory keeps the copy of its search's lookup table."""
    return Path(run_dir) / TABLE_COPY


def run_table(run_dir: Path, lut_hash: str | None) -> Path | None:
    """The copy of its lookup table a run directory keeps (RUN_DIR/lut.json), if it holds the
    table recorded by ``lut_hash``."""
    copy = table_copy(run_dir)
    if copy.is_file() and (lut_hash is None or file_hash(copy) == lut_hash):
        return copy
    return None


def recorded_lut(defn: dict, lut_path: str | Path | None, warn: Warn = warn_stderr,
                 arch_path: str | Path | None = None):
    """The table given by ``lut_path``, else the one the entry records if it still exists,
    else the run's copy next to the architecture file ``arch_path`` (RUN_DIR/arch.json and
    RUN_DIR/lut.json, wherever the run directory has moved) if it is the recorded table."""
    from fbnas.latency.lut import load_lut

    if lut_path is not None:
        return load_lut(lut_path)
    src = defn.get("source")
    rec = src.get("lut") if isinstance(src, dict) else None
    if not isinstance(rec, str):
        return None
    if not Path(rec).is_file() and arch_path is not None:
        h = src.get("lut_hash")
        copy = run_table(Path(arch_path).parent, h) if isinstance(h, str) else None
        if copy is not None:
            return load_lut(copy)
    if not Path(rec).is_file():
        warn(f"the architecture's lookup table {rec} does not exist here; pass --lut PATH "
             "for predictions")
        return None
    return load_lut(rec)
