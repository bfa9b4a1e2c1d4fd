"""Image folders: finding the classes and files, checking them, and decoding one image.

A folder dataset is ROOT/train/<class>/* with an optional ROOT/test/<class>/* (or
ROOT/val/<class>/*, ImageNet's name), or ROOT/<class>/* alone. Class ids are the positions
of the training split's class names in sorted order (or in a class-list file's order), so a
test image's label is found by its folder's name, never by position: a class folder missing
from one split cannot shift the labels of the others.

Every file is checked once when the folder is scanned, by opening its header (cheap: no
pixels are decoded), so a non-image or an oversized image is found before training starts;
an image whose data is damaged further in is found when it is decoded. Either way a bad file
is a one-line error naming it, or, with ``data.skip_bad``, skipped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from fbnas.errors import FbnasError, UsageError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
TEST_SPLITS = ("test", "val")
FOLDER_LAYOUT = ("ROOT/train/<class>/*.png|jpg and ROOT/test/<class>/*.png|jpg (or ROOT/val/), "
                 "or ROOT/<class>/*.png|jpg (no test split)")
SKIP_HINT = "remove it, or set data.skip_bad: true to skip unreadable files"
#: the most pixels an image fbnas decodes may have: 8192 x 8192, 192 MB decoded as RGB, in
#: every decoding process at once. Training images are shrunk to a few hundred pixels a
#: side, so a larger one is a mistake or a decompression bomb (a small file whose header
#: claims a huge image); Pillow only warns up to twice its own limit of about 89 million
MAX_IMAGE_PIXELS = 8192 * 8192


@dataclass
class Split:
    """The image files of one split and their labels (ids into the training classes)."""

    files: list[str]
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.files)


@dataclass
class FolderIndex:
    """What a scan of an image folder found: classes, splits, and what it skipped."""

    root: Path
    classes: list[str]
    train: Split
    test: Split | None
    #: (path, why) of every file or class folder skipped under data.skip_bad
    skipped: list[tuple[str, str]] = field(default_factory=list)


def folder_layout(root: Path | str) -> str:
    return FOLDER_LAYOUT.replace("ROOT", str(root))


#: characters a class list writes as escapes wherever they are in a name: the escape itself,
#: the comment sign, and characters that end or break a line or do not print
_ESCAPED = {"\\": "\\\\", "#": "\\#", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NAMED = {"\\": "\\", "#": "#", "n": "\n", "r": "\r", "t": "\t"}
_HEX = {"x": 2, "u": 4, "U": 8}


def _escape_char(c: str) -> str:
    if c in _ESCAPED:
        return _ESCAPED[c]
    o = ord(c)
    if 0xDC80 <= o <= 0xDCFF:  # a byte of a file name that is not UTF-8
        return f"\\x{o - 0xDC00:02x}"
    if o < 0x20 or o == 0x7F or (c.isspace() and c != " ") or not c.isprintable():
        return f"\\x{o:02x}" if o < 0x80 else f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"
    return c


def escape_class_name(name: str) -> str:
    """``name`` as one line of a class list that :func:`read_class_list` reads back as
    ``name``: a backslash, ``#``, line breaks, tabs and other unprintable characters escaped
    (``\\\\``, ``\\#``, ``\\n``, ``\\r``, ``\\t``, ``\\xHH``, ``\\uXXXX``), and spaces at either end
    written ``\\x20`` (a line's ends are stripped). A byte of a file name that is not UTF-8 is
    ``\\xHH`` with HH 80 or above."""
    out = [_escape_char(c) for c in name]
    for ends in (range(len(name)), range(len(name) - 1, -1, -1)):
        for i in ends:
            if name[i] != " ":
                break
            out[i] = "\\x20"
    return "".join(out)


def _unescape_line(line: str, where: str) -> str:
    """One line of a class list: escapes decoded, an unescaped ``#`` ends it, and unescaped
    white space at either end is dropped."""
    chars: list[tuple[str, bool]] = []  # (character, escaped)
    i = 0
    while i < len(line):
        c = line[i]
        if c == "#":
            break
        if c != "\\":
            chars.append((c, False))
            i += 1
            continue
        kind = line[i + 1:i + 2]
        if kind in _NAMED:
            chars.append((_NAMED[kind], True))
            i += 2
            continue
        digits = line[i + 2:i + 2 + _HEX.get(kind, 0)]
        if kind not in _HEX or len(digits) != _HEX[kind] or \
                not all(d in "0123456789abcdefABCDEF" for d in digits):
            bad = line[i:i + 2 + _HEX.get(kind, 0)]
            raise FbnasError(f"{where} has an unknown escape {bad!r}; write a backslash as "
                             "\\\\, and other characters as \\#, \\n, \\t, \\xHH or \\uXXXX")
        o = int(digits, 16)
        if kind == "x" and o >= 0x80:
            o += 0xDC00  # a raw byte of a file name, as Python holds one that is not UTF-8
        elif o > 0x10FFFF:
            raise FbnasError(f"{where} has an escape beyond Unicode ({line[i:i + 10]!r})")
        chars.append((chr(o), True))
        i += 2 + len(digits)
    while chars and not chars[0][1] and chars[0][0].isspace():
        chars.pop(0)
    while chars and not chars[-1][1] and chars[-1][0].isspace():
        chars.pop()
    return "".join(c for c, _ in chars)


def write_class_list(path: str | Path, names: list[str], comment: str = "") -> None:
    """Write ``names`` to ``path`` one per line, escaped (see :func:`escape_class_name`) so
    that :func:`read_class_list` gives them back exactly, after a ``# comment`` line."""
    from fbnas.io import atomic_write

    head = f"# {shown(comment)}\n" if comment else ""
    text = head + "".join(escape_class_name(n) + "\n" for n in names)
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def read_class_list(path: str | Path) -> list[str]:
    """Class folder names, one per line (blank lines and ``#`` comments ignored; escapes as
    :func:`escape_class_name` writes them)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FbnasError(f"cannot read class list {path}: {getattr(e, 'strerror', None) or e}; "
                         "point data.classes at a text file with one class folder name per "
                         "line") from None
    # lines end at \n alone (a trailing \r is white space): the other breaks str.splitlines
    # knows are characters a name may hold
    names = [_unescape_line(ln, f"class list {path}, line {n}")
             for n, ln in enumerate(text.split("\n"), 1)]
    names = [n for n in names if n]
    if not names:
        raise FbnasError(f"class list {path} names no classes; write one class folder name "
                         "per line")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FbnasError(f"class list {path} names {shown(dup[0])} twice; list each class once")
    return names


def scan_folder(root: str | Path, classes: list[str] | None = None,
                skip_bad: bool = False) -> FolderIndex:
    """Find the splits, classes and image files of ``root`` and check every file's header.

    ``classes`` restricts the dataset to those class folders, in that order (their ids);
    each must exist in the training split.
    """
    root = Path(root)
    if not root.is_dir():
        raise FbnasError(f"image folder {root} does not exist: point --data-dir (data.dir) at "
                         f"your images, expected {folder_layout(root)}")
    train_dir = root / "train"
    split = train_dir.is_dir() and any(p.is_dir() for p in train_dir.iterdir())
    test_dir = next((root / s for s in TEST_SPLITS if (root / s).is_dir()), None) if split \
        else None
    if not split:
        train_dir = root
    found = _class_dirs(train_dir, root)
    if classes is None:
        names = [d.name for d in found]
    else:
        have = {d.name for d in found}
        missing = [c for c in classes if c not in have]
        if missing:
            raise FbnasError(f"{shown(train_dir)} has no class folder "
                             f"{escape_class_name(missing[0])} named in the class list "
                             f"({len(missing)} missing); check data.classes and data.dir")
        names = list(classes)
    skipped: list[tuple[str, str]] = []
    train = _split_files(train_dir, names, names, root, skip_bad, skipped)
    test = None
    if test_dir is not None:
        test_names = [d.name for d in _class_dirs(test_dir, root)]
        unknown = [c for c in test_names if c not in names and classes is None]
        if unknown:
            raise FbnasError(f"{shown(test_dir)} has classes not in {shown(train_dir)}: "
                             f"{', '.join(escape_class_name(u) for u in unknown)}; "
                             f"expected {folder_layout(root)} with the same class names")
        test = _split_files(test_dir, [c for c in names if c in test_names], names, root,
                            skip_bad, skipped)
    return FolderIndex(root, names, train, test, skipped)


def not_a_file(path: Path) -> str:
    """Why ``path``, named as an image but not a regular file (nor a folder), is left out."""
    if path.is_symlink():
        return "is a symbolic link to a missing file or to itself"
    return "is not a regular file (a pipe, socket or device?)"


def _class_dirs(folder: Path, root: Path) -> list[Path]:
    broken = sorted(p for p in folder.iterdir() if p.is_symlink() and not p.exists()
                    and not p.name.startswith(".") and p.suffix.lower() not in IMAGE_SUFFIXES)
    if broken:
        # no skip_bad here: a class left out would shift the ids of the classes after it
        raise FbnasError(f"class folder {shown(broken[0])} is a symbolic link to a missing folder "
                         f"or to itself ({len(broken)} such); fix or remove the link")
    dirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not dirs:
        raise FbnasError(f"{folder} has no class folders: expected {folder_layout(root)}")
    return dirs


def _split_files(folder: Path, present: list[str], names: list[str], root: Path,
                 skip_bad: bool, skipped: list) -> Split:
    files: list[str] = []
    labels: list[int] = []
    ids = {n: i for i, n in enumerate(names)}
    for name in present:
        d = folder / name
        good = []
        for p in sorted(p for p in d.iterdir()
                        if p.suffix.lower() in IMAGE_SUFFIXES and not p.is_dir()):
            why = check_header(p) if p.is_file() else not_a_file(p)
            if why is None:
                good.append(str(p))
            elif skip_bad:
                skipped.append((shown(p), why))
            else:
                raise FbnasError(f"image {shown(p)} {why}; {SKIP_HINT}")
        if not good:
            why = f"has no readable images ({', '.join(IMAGE_SUFFIXES)})"
            if not skip_bad:
                raise FbnasError(f"class folder {shown(d)} {why}; add images, remove the "
                                 "folder, or set data.skip_bad: true")
            skipped.append((shown(d), why))  # the class keeps its id: no label shifts
        files += good
        labels += [ids[name]] * len(good)
    if not files:
        raise FbnasError(f"{folder} holds no readable images: expected {folder_layout(root)}")
    return Split(files, torch.tensor(labels, dtype=torch.int64))


def shown(path: str | Path) -> str:
    """``path`` as it can be printed and logged: bytes of a file name that are not UTF-8 (which
    Python holds as lone surrogates) written as \\xHH escapes."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def drop_unreadable(index: FolderIndex, part: Split, bad: dict[int, str],
                    skip_bad: bool) -> None:
    """Leave the files at positions ``bad`` (-> why) out of ``part``, a split of ``index``,
    recording them in ``index.skipped``; without ``skip_bad`` the first is an error naming it.
    A class folder left with no images keeps its id, as at the scan."""
    first = min(bad)
    if not skip_bad:
        raise FbnasError(f"image {shown(part.files[first])} {bad[first]}; {SKIP_HINT}")
    folder = Path(part.files[first]).parent.parent
    keep = [i for i in range(len(part.files)) if i not in bad]
    before = set(part.labels.tolist())
    for i in sorted(bad):
        index.skipped.append((shown(part.files[i]), bad[i]))
    part.files = [part.files[i] for i in keep]
    part.labels = part.labels[torch.tensor(keep, dtype=torch.int64)]
    for c in sorted(before - set(part.labels.tolist())):
        index.skipped.append((shown(folder / index.classes[c]),
                              f"has no readable images ({', '.join(IMAGE_SUFFIXES)})"))
    if not part.files:
        raise FbnasError(f"{shown(index.root)} holds no readable images in one of its splits: "
                         f"expected {folder_layout(shown(index.root))}")


class ImageTooLarge(ValueError):
    """An image whose header claims more pixels than fbnas decodes; the message says why."""


def _too_large(pixels: str) -> ImageTooLarge:
    side = int(MAX_IMAGE_PIXELS ** 0.5)
    return ImageTooLarge(f"claims {pixels} pixels, more than the {MAX_IMAGE_PIXELS:,} "
                         f"({side}x{side}) fbnas decodes (a decompression bomb?)")


def open_image(path: str | Path):
    """``Image.open(path)`` (header only, nothing decoded) under fbnas's own pixel limit, the
    one way fbnas opens an image: an image above ``MAX_IMAGE_PIXELS`` raises
    :class:`ImageTooLarge`, and so does one Pillow itself finds too large, whose
    DecompressionBombWarning (printed raw, once per worker process) becomes this refusal."""
    import warnings

    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            img = Image.open(path)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            raise _too_large(_claimed(str(e))) from None
    w, h = img.size
    if w * h > MAX_IMAGE_PIXELS:
        img.close()
        raise _too_large(f"{w}x{h}")
    return img


def _claimed(message: str) -> str:
    """The pixel count in Pillow's decompression-bomb message ("Image size (N pixels)...")."""
    import re

    m = re.search(r"\((\d+) pixels\)", message)
    return f"{int(m.group(1)):,}" if m else "more"


def check_header(path: Path) -> str | None:
    """Why ``path`` is not an image fbnas opens (header only), else None."""
    from PIL import UnidentifiedImageError

    try:
        with open_image(path) as img:
            w, h = img.size
            if w < 1 or h < 1:
                return f"has no pixels ({w}x{h})"
    except ImageTooLarge as e:
        return str(e)
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as e:
        return shown(f"cannot be read as an image ({e})")
    return None


def open_rgb(path: str):
    """The image at ``path`` as a fully decoded RGB Pillow image; ValueError with a short
    reason if it cannot be (Pillow refuses truncated data unless told otherwise, and fbnas
    does not tell it)."""
    try:
        with open_image(path) as img:
            out = img.convert("RGB")
            out.load()
            return out
    except ImageTooLarge:
        raise
    except (OSError, ValueError, SyntaxError) as e:
        raise ValueError(shown(str(e) or type(e).__name__)) from None


def check_resolution(resolution: int) -> None:
    if resolution < 1:
        raise UsageError(f"resolution must be a positive number of pixels, not {resolution}")


def pick_classes(root: str | Path, num: int, seed: int) -> list[str]:
    """``num`` class folder names of ``root``'s training split drawn at random with ``seed``
    (from the sorted names, so the draw depends on the names alone), returned sorted."""
    import random

    root = Path(root)
    if not root.is_dir():
        raise FbnasError(f"image folder {root} does not exist: point it at an ImageNet copy, "
                         f"expected {folder_layout(root)}")
    train = root / "train" if (root / "train").is_dir() else root
    names = [d.name for d in _class_dirs(train, root)]
    if num > len(names):
        raise FbnasError(f"{train} has {len(names)} class folders, fewer than the {num} asked "
                         f"for; pass --num {len(names)} or less")
    return sorted(random.Random(seed).sample(names, num))


def link_subset(root: str | Path, classes: list[str], dest: str | Path) -> int:
    """Make ``dest``/train/<class> (and test or val, as ``root`` has them) symbolic links to
    ``root``'s class folders; returns how many links were made. ``dest`` must not exist: the
    links go into a temporary sibling folder renamed into place, so a failed run leaves
    nothing half made."""
    import os
    import shutil
    import tempfile

    root, dest = Path(root).resolve(), Path(dest)
    splits = [s for s in ("train", *TEST_SPLITS) if (root / s).is_dir()] or [""]
    made, tmp = 0, None
    # the missing folders above dest, innermost first: made here, removed again on failure
    parents = [p for p in dest.parents if not p.exists()]
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
        for split in splits:
            (tmp / split).mkdir(parents=True, exist_ok=True)
            for c in classes:
                if (root / split / c).is_dir():
                    os.symlink(root / split / c, tmp / split / c, target_is_directory=True)
                    made += 1
        os.rename(tmp, dest)
    except OSError as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for folder in parents:
            try:
                folder.rmdir()
            except OSError:
                break
        raise FbnasError(f"cannot make the class folder links in {dest}: {e.strerror or e}; "
                         "pick another --link") from None
    return made
