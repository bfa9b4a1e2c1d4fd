"""Files a folder run cannot read are found before it trains, whichever loader serves them."""

import os
import shutil

import pytest

from fbnas.data.folders import scan_folder
from fbnas.errors import FbnasError
from tests.data.test_folders import save
from tests.data.test_stream import folder, folder_config  # noqa: F401  (a fixture)


# -- links the scan met but left out without a word --------------------------------------------

@pytest.fixture
def linked(tmp_path):
    root = tmp_path / "links"
    for c in ("cat", "dog"):
        for k in range(2):
            save(root / "train" / c / f"{k}.png", (8, 8), color=(k * 90, 40, 40))
    os.symlink("self.jpg", root / "train" / "cat" / "self.jpg")  # a link to itself
    os.symlink(tmp_path / "gone.jpg", root / "train" / "dog" / "gone.jpg")  # to nothing
    return root


def test_links_to_nothing_are_named(linked):
    with pytest.raises(FbnasError, match=r"image .*cat/self.jpg is a symbolic link to a missing "
                                         r"file or to itself; .*skip_bad") as e:
        scan_folder(linked)
    assert "\n" not in str(e.value)
    (linked / "train" / "cat" / "self.jpg").unlink()
    with pytest.raises(FbnasError, match="dog/gone.jpg is a symbolic link"):
        scan_folder(linked)


def test_links_to_nothing_are_skipped_and_counted(linked):
    index = scan_folder(linked, skip_bad=True)
    assert len(index.train) == 4
    assert sorted(os.path.basename(p) for p, _ in index.skipped) == ["gone.jpg", "self.jpg"]
    assert all("symbolic link" in why for _, why in index.skipped)


def test_a_class_folder_link_to_nothing_is_named(linked, tmp_path):
    os.symlink(tmp_path / "moved", linked / "train" / "bird")
    for skip in (False, True):
        with pytest.raises(FbnasError, match=r"class folder .*train/bird is a symbolic link to "
                                             r"a missing folder"):
            scan_folder(linked, skip_bad=skip)


# -- damaged data past the header, streamed -----------------------------------------------------

@pytest.mark.slow
def test_a_streamed_run_refuses_a_truncated_image_before_training(folder, tiny_lut_file,
                                                                  tmp_path):
    from fbnas.search.run import run_search
    from tests.whole.test_search import quiet

    root = tmp_path / "bad"
    shutil.copytree(folder, root)
    jpg = root / "train" / "cat" / "001.jpg"
    jpg.write_bytes(jpg.read_bytes()[:-300])  # the header reads, the pixels do not
    cfg = folder_config(tiny_lut_file, root, **{"search.epochs": 1})
    with pytest.raises(FbnasError, match=r"image .*cat/001.jpg cannot be decoded .*skip_bad") as e:
        run_search(cfg, tmp_path / "run", echo=quiet)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()  # refused before the run started

    cfg = folder_config(tiny_lut_file, root, **{"search.epochs": 1, "data.skip_bad": "true"})
    run_search(cfg, tmp_path / "skip", echo=quiet)
    log = (tmp_path / "skip" / "train.log").read_text()
    at = log.index("skipped 1 unreadable file(s) or empty class folder(s) (data.skip_bad; 1 in "
                   "all), first ")
    assert "cat/001.jpg: cannot be decoded" in log[at:] and at < log.index("epoch 1/1")
    assert "each decoded once before training" in log


@pytest.mark.slow
def test_an_image_damaged_mid_run_is_one_line_and_the_run_resumes(folder, tiny_lut_file,
                                                                  tmp_path, monkeypatch):
    from fbnas.runs.checkpoint import load_checkpoint
    from fbnas.search.run import run_search
    from tests.whole.test_search import quiet, same_state

    root = tmp_path / "data"
    shutil.copytree(folder, root)
    cfg = folder_config(tiny_lut_file, root)
    run_search(cfg, tmp_path / "full", echo=quiet)
    assert run_search(cfg, tmp_path / "run", stop_after=1, echo=quiet)["stopped"]
    jpg = root / "train" / "cat" / "001.jpg"
    good = jpg.read_bytes()
    jpg.write_bytes(good[:-300])
    import fbnas.data.stream as stream

    with monkeypatch.context() as m:  # the file turns bad after the run's start-up check
        m.setattr(stream, "check_decodes", lambda *a, **k: None)
        with pytest.raises(FbnasError, match=r"cat/001.jpg cannot be decoded .*though it decoded "
                                             r"when the run started.*--resume") as e:
            run_search(cfg, tmp_path / "run", resume=True, echo=quiet)
    assert "\n" not in str(e.value)
    jpg.write_bytes(good)
    run_search(cfg, tmp_path / "run", resume=True, echo=quiet)
    same_state(load_checkpoint(tmp_path / "full/checkpoints/last.pt"),
               load_checkpoint(tmp_path / "run/checkpoints/last.pt"))


# -- class lists: whatever a folder may be called, the list gives it back -----------------------

ODD_NAMES = ["a b", "#x", "x#y # z", "  lead", "trail ", "x\ny", "back\\slash", "tab\tz",
             "\u2028sep", "caf\udce9", "é ok", "\r", "plain"]


def test_class_lists_round_trip_any_folder_name(tmp_path):
    from fbnas.data.folders import read_class_list, write_class_list

    path = tmp_path / "c.txt"
    write_class_list(path, ODD_NAMES, "written for caf\udce9")
    assert read_class_list(path) == ODD_NAMES
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == "# written for caf\\xe9" and "caf\\xe9" in lines and "x\\#y \\# z" in lines
    # hand-written lists keep their meaning: comments, blank lines, spaces at the ends
    path.write_text("# mine\n\n  dog  # the dogs\ncat\r\nn\\u00e9e\n")
    assert read_class_list(path) == ["dog", "cat", "n\u00e9e"]


@pytest.mark.parametrize("line", ["a\\qb", "a\\x4", "a\\", "\\U00110000"])
def test_a_class_list_with_a_bad_escape_names_the_line(tmp_path, line):
    from fbnas.data.folders import read_class_list

    path = tmp_path / "c.txt"
    path.write_text(f"ok\n{line}\n")
    with pytest.raises(FbnasError, match=r"c.txt, line 2 has .*escape") as e:
        read_class_list(path)
    assert "\n" not in str(e.value)


def test_the_classes_command_writes_names_a_run_reads_back(tmp_path):
    from click.testing import CliRunner

    from fbnas.cli import main

    root = tmp_path / "odd"
    for name in ODD_NAMES:
        save(root / "train" / name / "0.png", (8, 8), color=(1, 2, 3))
    (root / "train" / "plain" / "bad\udcff.png").write_text("not an image")
    out = tmp_path / "list.txt"
    res = CliRunner().invoke(main, ["classes", str(root), "--num", str(len(ODD_NAMES)),
                                    "--out", str(out)])
    assert res.exit_code == 0, res.output
    from fbnas.data.folders import read_class_list

    assert sorted(read_class_list(out)) == sorted(ODD_NAMES)
    index = scan_folder(root, read_class_list(out), skip_bad=True)
    assert sorted(index.classes) == sorted(ODD_NAMES) and len(index.train) == len(ODD_NAMES)
    # the skipped file is named printably: a log line holding it can be written
    (path, why), = index.skipped
    assert path.endswith("plain/bad\\xff.png")
    (path + why).encode("utf-8")
    with pytest.raises(FbnasError, match=r"image .*plain/bad\\xff.png cannot be read") as e:
        scan_folder(root)
    str(e.value).encode("utf-8")


def test_a_missing_listed_class_is_named_as_the_list_writes_it(tmp_path):
    from fbnas.data.folders import read_class_list, write_class_list

    save(tmp_path / "d" / "train" / "cat" / "0.png", (8, 8))
    write_class_list(tmp_path / "c.txt", ["cat", "caf\udce9"])
    with pytest.raises(FbnasError, match=r"no class folder caf\\xe9 named in the class list "
                                         r"\(1 missing\)"):
        scan_folder(tmp_path / "d", read_class_list(tmp_path / "c.txt"))
