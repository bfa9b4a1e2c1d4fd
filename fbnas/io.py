"""Reading and writing the files fbnas keeps: atomic writes, and JSON or YAML read safely.

Writes go to a temporary file in the same folder, fsync, then rename. Reads turn whatever a
damaged or hostile file can do to a parser (truncation, a key given twice, an integer too long
to convert, nesting deep enough to exhaust the interpreter's stack) into one-line errors; all
JSON fbnas reads goes through :func:`parse_json`, all YAML through :func:`parse_yaml`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml

from fbnas.errors import FbnasError, brief


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` and move the result onto ``path`` in one rename."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise FbnasError(f"cannot write {path}: {e.strerror}") from None
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        # mkstemp creates owner-only files; give the result the usual umask-based mode
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, path)
    except OSError as e:
        raise FbnasError(f"cannot write {path}: {e.strerror}") from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def check_writable(path: str | Path, option: str = "--out") -> None:
    """Refuse, before any work, an output path that cannot be written: its nearest existing
    ancestor must be a folder that accepts a new file (probed by creating and removing one,
    which also catches read-only mounts and /proc, where permission bits say nothing)."""
    path = Path(path)
    try:
        path.exists()
    except OSError as e:  # a name longer than the file system allows, for one
        raise FbnasError(f"cannot write {path}: {e.strerror}; pick another {option}") from None
    if path.is_dir():
        raise FbnasError(f"{option} {path} is a folder; give a file path")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise FbnasError(f"cannot write {path}: {folder} is a file, not a folder; pick another "
                         f"{option}")
    # a name too long for the file system in a folder yet to be made shows only on writing
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        name_max = 255
    for part in path.relative_to(folder).parts:
        if len(os.fsencode(part)) > name_max:
            raise FbnasError(f"cannot write {path}: the name {part[:24]}... is longer than the "
                             f"{name_max} bytes the file system allows; pick another {option}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".fbnas-write-test.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise FbnasError(f"cannot write {path}: folder {folder} does not accept new files "
                         f"({e.strerror}); pick another {option} or make the folder "
                         "writable") from None


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    text = json.dumps(data, indent=1, sort_keys=False) + "\n"
    atomic_write(path, lambda p: p.write_text(text))


def read_json(path: str | Path, what: str) -> Any:
    """Read a JSON file; a missing, truncated or corrupted file, or one that gives a key
    twice, is a one-line FbnasError."""
    path = Path(path)
    if not path.is_file():
        raise FbnasError(f"{what} {path} does not exist")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise FbnasError(f"cannot read {what} {path}: {e}") from None
    return parse_json(text, f"{what} {path}")


class _KeyTwice(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object as a dict, refusing a key given twice (``json`` keeps the last one
    silently: a table entry given twice was read with its second median)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _KeyTwice(key)
        out[key] = value
    return out


def parse_json(text: str, what: str) -> Any:
    """JSON text as Python objects, the one way fbnas reads JSON: a key given twice in an
    object, invalid JSON, a number too long to convert or nesting too deep is a one-line
    FbnasError naming ``what`` (the file)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _KeyTwice as e:
        raise FbnasError(f"{what} gives the key {brief(e.key)} twice in one object; keep "
                         "one") from None
    except json.JSONDecodeError as e:
        raise FbnasError(f"{what} is not valid JSON (truncated or corrupted?) at line "
                         f"{e.lineno}: {e.msg}") from None
    except (ValueError, RecursionError) as e:
        raise _beyond_parser(what, e) from None


def _beyond_parser(what: str, e: Exception) -> FbnasError:
    """What a parser's ValueError (an integer beyond Python's conversion limit of 4300
    digits) or RecursionError (nesting deeper than the interpreter's stack) means."""
    if isinstance(e, RecursionError):
        return FbnasError(f"{what} is nested too deeply to read; no fbnas file nests more "
                          "than a few levels")
    return FbnasError(f"{what} holds a number fbnas cannot read ({str(e).split(';')[0]}); "
                      "write it with fewer digits")


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a mapping that names a key twice is an error: the safe loader
    keeps the last value silently, so a config with two ``epochs:`` ran the one the user did
    not mean."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                    continue
                key = key_node.value
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} is given twice; keep one",
                        key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, what: str) -> Any:
    """YAML text through the strict safe loader; any failure a one-line FbnasError."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None)
        why = f": {problem}" if problem and "twice" in problem else ""
        raise FbnasError(f"{what} is not valid YAML{where}{why}") from None
    except (ValueError, RecursionError) as e:
        raise _beyond_parser(what, e) from None


def load_yaml(path: Any, what: str) -> Any:
    """Read a YAML file (a path or a bundled file) with the strict safe loader."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise FbnasError(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise FbnasError(f"{what} {path} is not a text file (not UTF-8); give a YAML "
                         "file") from None
    return parse_yaml(text, f"{what} {path}")


def refuse_overwrite(path: str | Path, force: bool) -> None:
    """Refuse to replace an existing result unless the user passed --force."""
    if Path(path).exists() and not force:
        raise FbnasError(f"{path} already exists; pass --force to overwrite it")


def file_hash(path: str | Path) -> str:
    """Short sha256 of a file's bytes: how checkpoints and definitions name their sources."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]
