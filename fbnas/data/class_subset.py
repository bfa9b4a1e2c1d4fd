"""A class subset of an image folder written down as a class list: ``fbnas classes``.

The paper's ImageNet-100 is 100 classes drawn from ImageNet; this writes such a draw as the
class list ``data.classes`` reads, and can also lay the drawn classes out as a folder of
links, a data set of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def write_class_subset(root: Path, num: int, seed: int, out: Path, link: Path | None = None,
                       force: bool = False, echo: Callable[[str], None] = print) -> list[str]:
    """Draw ``num`` classes of the image folder ``root`` with ``seed``, write their list to
    ``out`` (with ``link``, also link their folders under that new folder) and return
    them. The same folder and seed give the same classes."""
    from fbnas.errors import UsageError
    from fbnas.io import atomic_write, refuse_overwrite
    from fbnas.data.folders import link_subset, pick_classes

    refuse_overwrite(out, force)
    if link is not None and link.exists():
        raise UsageError(f"{link} already exists; name a new folder for --link")
    names = pick_classes(root, num, seed)
    header = f"# {num} classes of {root} drawn with seed {seed} (fbnas classes)\n"
    atomic_write(out, lambda p: p.write_text(header + "".join(f"{n}\n" for n in names)))
    echo(f"wrote {out}: {num} classes of {root}, seed {seed}")
    if link is not None:
        made = link_subset(root, names, link)
        echo(f"linked {made} class folders into {link}; train on it with data.dir: {link}")
    return names
