"""Atomic file writes: a temporary file in the same folder, fsync, then rename."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from fbnas.errors import FbnasError


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
    if path.is_dir():
        raise FbnasError(f"{option} {path} is a folder; give a file path")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise FbnasError(f"cannot write {path}: {folder} is a file, not a folder; pick another "
                         f"{option}")
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
    """Read a JSON file; a missing, truncated or corrupted file is a one-line FbnasError."""
    path = Path(path)
    if not path.is_file():
        raise FbnasError(f"{what} {path} does not exist")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise FbnasError(f"cannot read {what} {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise FbnasError(f"{what} {path} is not valid JSON (truncated or corrupted?) at line "
                         f"{e.lineno}: {e.msg}") from None


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
