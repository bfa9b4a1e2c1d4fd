"""The config a search or retrain runs with, from all the places a setting can come from.

Later places win: the defaults, the resumed run's config, the ``--config`` file (over its
own ``base:``), the command's named options, the user's ``--set key=value``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fbnas.config import Config


def run_config(config_path: str | Path | None, out: Path, resume: bool = False,
               force: bool = False, overrides: tuple[str, ...] = (), download: bool = False,
               options: dict[str, Any] | None = None) -> Config:
    """The run's config. ``options`` maps dotted config keys to the typed values of the
    named options (None: not given); ``overrides`` are ``--set`` strings, read as YAML;
    ``download`` sets data.download. Resuming takes the config saved in ``out``."""
    from fbnas.config import load_config
    from fbnas.errors import UsageError
    from fbnas.runs.rundir import resume_config

    if resume and force:
        raise UsageError("--resume continues a run and --force starts over; pick one")
    base = resume_config(out) if resume else None
    given = {k: v for k, v in (options or {}).items() if v is not None}
    if download:
        given["data.download"] = True
    return load_config(config_path, list(overrides), base=base, options=given)
