"""Files that ship inside the package: the bundled search spaces, run configs and
architectures.

They live in ``fbnas/spaces/``, ``fbnas/configs/`` (YAML) and ``fbnas/archs/`` (model
definitions, JSON) and are read through ``importlib.resources`` rather than through paths
next to the source or the working directory, so an installed wheel finds them from any
folder, and a checkout and an install see the same files.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

YAML_SUFFIXES = (".yaml", ".yml")
JSON_SUFFIXES = (".json",)


def bundled(kind: str, suffixes: tuple[str, ...] = YAML_SUFFIXES) -> dict[str, Any]:
    """The bundled files of one kind ("spaces", "configs" or, with ``JSON_SUFFIXES``,
    "archs"), by name without the suffix.

    The values are ``importlib.resources`` traversables: they have ``read_text`` and a
    ``name``, and are real paths whenever the package is installed as files.
    """
    folder = resources.files("fbnas") / kind
    if not folder.is_dir():
        return {}
    found = {}
    for item in sorted(folder.iterdir(), key=lambda t: t.name):
        stem, dot, suffix = item.name.rpartition(".")
        if dot and "." + suffix in suffixes and item.is_file():
            found.setdefault(stem, item)
    return found


def names_a_file(name_or_path: str | Path, folder: Path | None = None,
                 suffixes: tuple[str, ...] = YAML_SUFFIXES) -> bool:
    """Whether a ``--space``/``--config`` value (or, with ``JSON_SUFFIXES``, an architecture
    file argument), relative to ``folder`` or to the working directory, is a file path rather
    than a bundled name."""
    p = Path(name_or_path)
    return (p.suffix in suffixes or len(p.parts) > 1
            or (folder / p if folder is not None else p).exists())
