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
    from dataclasses import replace

    from fbnas.arch.definition import add_architectures
    from fbnas.config import Budget
    from fbnas.errors import UsageError
    from fbnas.io import check_writable
    from fbnas.latency.reports import format_entry, format_ranked
    from fbnas.search.checkpoint import load_search_checkpoint
    from fbnas.search.sampling import sample_architectures
    from fbnas.search.table import resolve_lut

    if hard and num > 1:
        raise UsageError("--num draws from softmax(theta); --hard gives one architecture")
    if target_ms is not None and not hard:
        raise UsageError("--target-ms picks the most probable architecture within a latency "
                         "budget; add --hard")
    ck = load_search_checkpoint(source)
    out = out or ck.run_dir / "arch.json"
    check_writable(out)
    lut = resolve_lut(ck, lut_path)
    budget = None
    if target_ms is not None:
        budget = Budget(target_ms, ck.floor if floor is None else floor)
    elif hard and ck.budget is not None:
        budget = ck.budget if floor is None else replace(ck.budget, floor=floor)
        echo(f"within the search's latency budget of {budget.ms:g} ms (loss.target_ms); "
             "--target-ms sets another")
    if floor is not None and budget is None:
        raise UsageError("--floor is a share of a latency budget; give --target-ms, or sample "
                         "a search that had one")
    entries = sample_architectures(ck, lut, hard, num=num, seed=seed, name=name, budget=budget)
    add_architectures(out, entries, force=force)
    if len(entries) == 1:
        echo(format_entry(entries[0], lut))
    else:
        echo(format_ranked(entries, num, seed))
    what = entries[0]["name"] if len(entries) == 1 else f"{len(entries)} architectures"
    echo(f"wrote {what} to {out}")
    return entries
