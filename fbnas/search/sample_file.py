"""Architectures drawn from a search's theta, added to an architecture file: ``fbnas sample``.

Reads the search checkpoint (a run folder's last one, or a named file), finds the table the
search used, takes the budget the search had unless told another, and writes the sampled
networks with their predictions into the architecture file that ``fbnas retrain``,
``summary``, ``latency`` and ``export`` read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def sample_to_file(source: Path, hard: bool = False, target_ms: float | None = None,
                   num: int = 1, seed: int = 0, name: str | None = None, out: Path | None = None,
                   lut_path: Path | None = None, force: bool = False,
                   floor: float | None = None, echo: Callable[[str], None] = print) -> list[dict]:
    """Sample ``num`` architectures (or, with ``hard``, the most probable one, within the
    budget ``target_ms`` or the search's own) from the checkpoint ``source``, add them to
    ``out`` (default: the run folder's arch.json), report them to ``echo`` and return
    their entries."""
    from fbnas.arch.definition import add_architectures
    from fbnas.errors import UsageError
    from fbnas.io import check_writable
    from fbnas.latency.reports import format_entry, format_ranked
    from fbnas.runs.checkpoint import load_search_checkpoint
    from fbnas.runs.rundir import resolve_lut
    from fbnas.search.sampling import sample_architectures

    if hard and num > 1:
        raise UsageError("--num draws from softmax(theta); --hard gives one architecture")
    if target_ms is not None and not hard:
        raise UsageError("--target-ms picks the most probable architecture within a latency "
                         "budget; add --hard")
    ck = load_search_checkpoint(source)
    out = out or ck.run_dir / "arch.json"
    check_writable(out)
    lut = resolve_lut(ck, lut_path)
    if hard and target_ms is None and ck.target_ms is not None:
        target_ms = ck.target_ms
        echo(f"within the search's latency budget of {target_ms:g} ms (loss.target_ms); "
             "--target-ms sets another")
    if floor is not None and target_ms is None:
        raise UsageError("--floor is a share of a latency budget; give --target-ms, or sample "
                         "a search that had one")
    entries = sample_architectures(ck, lut, hard, num=num, seed=seed, name=name,
                                   target_us=None if target_ms is None else target_ms * 1000.0,
                                   floor=ck.target_floor if floor is None else floor)
    add_architectures(out, entries, force=force)
    if len(entries) == 1:
        echo(format_entry(entries[0], lut))
    else:
        echo(format_ranked(entries, num, seed))
    what = entries[0]["name"] if len(entries) == 1 else f"{len(entries)} architectures"
    echo(f"wrote {what} to {out}")
    return entries
