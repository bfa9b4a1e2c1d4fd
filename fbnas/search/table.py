"""The lookup table that goes with a search run.

A search keeps a byte copy of the table it ran with in its run directory, RUN_DIR/lut.json,
calibration included, so that re-profiling or calibrating the original later changes nothing
for the run: a resumed search trains against the copy, and sampling predicts with it. The
functions here write that copy and find the table a search checkpoint predicts with; the
rules it shares with architecture files are in fbnas.latency.recorded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fbnas.errors import FbnasError, Warn, warn_stderr
from fbnas.io import atomic_write, file_hash
from fbnas.latency.matching import warn_other_machine
from fbnas.latency.recorded import run_table, table_copy


def copy_table(src: Path, run_dir: str | Path, expected_hash: str) -> None:
    """Keep the run's lookup table as RUN_DIR/lut.json, byte for byte."""
    copy = table_copy(run_dir)
    if src.resolve() == copy.resolve():
        return
    atomic_write(copy, lambda p: shutil.copyfile(src, p))
    if file_hash(copy) != expected_hash:
        copy.unlink(missing_ok=True)
        raise FbnasError(f"lookup table {src} changed while the run started; start again")


def resolve_lut(ck, lut_path: str | Path | None = None,
                warn: Warn = warn_stderr):
    """The table to predict with: ``lut_path``, else the search's own (the run directory's
    copy; for a run directory without one, the table at the path it records), checked
    against the space.

    A missing table is an error (predictions are part of every definition). A recorded table
    whose hash differs from the search's only warns: ``fbnas calibrate`` adds a calibration
    in place, which changes the hash but not the entries the search trained against.
    """
    from fbnas.latency.lut import load_lut

    if lut_path is None:
        lut_path = run_table(ck.run_dir, ck.lut_hash)
    if lut_path is None:
        if not ck.lut_path:
            raise FbnasError(f"checkpoint {ck.path} does not record its lookup table; "
                             "pass --lut PATH")
        if not Path(ck.lut_path).is_file():
            raise FbnasError(f"the search's lookup table {ck.lut_path} does not exist (paths "
                             "are relative to where fbnas train ran); pass --lut PATH")
        lut_path = ck.lut_path
    lut = load_lut(lut_path)
    lut.check_space(ck.space)
    warn_other_machine(lut, warn)
    h = file_hash(lut_path)
    if ck.lut_hash and h != ck.lut_hash:
        warn(f"lookup table {lut_path} (hash {h}) is not the file the search used (hash "
             f"{ck.lut_hash}); it was re-profiled or calibrated since, predictions use it as "
             "it is now")
    return lut
