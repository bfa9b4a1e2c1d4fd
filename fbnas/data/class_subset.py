"""A class subset of an image folder written down as a class list: ``fbnas classes``.

The paper's ImageNet-100 is 100 classes drawn from ImageNet; this writes such a draw as the
class list ``data.classes`` reads, and can also lay the drawn classes out as a folder of
links, a data set of its own. Names are written with the escapes of
:func:`fbnas.data.folders.escape_class_name`, so that any folder name reads back as itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def write_class_subset(root: Path, num: int, seed: int, out: Path, link: Path | None = None,
                       force: bool = False, echo: Callable[[str], None] = print) -> list[str]:
    """Draw ``num`` classes of the image folder ``root`` with ``seed``, write their list to
    ``out`` (with ``link``, also link their folders under that new folder) and return
    them. The same folder and seed give the same classes."""
    import shutil

    from fbnas.errors import FbnasError, UsageError
    from fbnas.io import check_writable, refuse_overwrite
    from fbnas.data.folders import link_subset, pick_classes, shown, write_class_list

    # both targets are checked before anything is written: a --link under a file once
    # failed after the class list was written
    refuse_overwrite(out, force)
    check_writable(out)
    if link is not None:
        if link.exists():
            raise UsageError(f"{link} already exists; name a new folder for --link")
        check_writable(link, "--link")
    names = pick_classes(root, num, seed)
    where = shown(root)  # names are escaped in the list (docs/data.md), a path when printed
    made = link_subset(root, names, link) if link is not None else 0
    try:
        write_class_list(out, names,
                         f"{num} classes of {where} drawn with seed {seed} (fbnas classes)")
    except FbnasError:
        if link is not None:  # the links without their list would be a half-made result
            shutil.rmtree(link, ignore_errors=True)
        raise
    echo(f"wrote {out}: {num} classes of {where}, seed {seed}")
    if link is not None:
        echo(f"linked {made} class folders into {link}; train on it with data.dir: {link}")
    return names
