"""Image folders streamed by worker processes: determinism, exact resume, bad files."""

import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from fbnas.config import load_config
from fbnas.data.cifar import load_cifar10
from fbnas.data.folders import scan_folder
from fbnas.data.stream import StreamLoader, crop_box, sample_stats
from fbnas.errors import FbnasError
from fbnas.runs.checkpoint import load_checkpoint
from fbnas.search.run import run_search
from tests.conftest import require_cifar_subset
from tests.whole.test_search import quiet, same_state

pytestmark = pytest.mark.slow  # writes a folder from the CIFAR-10 subset and searches on it

PER_CLASS, TEST_PER_CLASS = 24, 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """ROOT/train/<class>/ and ROOT/test/<class>/ from the CIFAR-10 subset, JPEG and PNG
    alternately, upscaled to 40x40 so that crops resize as they would at full size."""
    data = load_cifar10(require_cifar_subset())
    root = tmp_path_factory.mktemp("folder")
    for split, images, labels, per in (
            ("train", data.train_images, data.train_labels, PER_CLASS),
            ("test", data.test_images, data.test_labels, TEST_PER_CLASS)):
        for c, name in enumerate(data.classes):
            (root / split / name).mkdir(parents=True)
            idx = (labels == c).nonzero().flatten()[:per]
            for k, i in enumerate(idx.tolist()):
                img = Image.fromarray(images[i].permute(1, 2, 0).numpy()).resize((40, 40))
                img.save(root / split / name / f"{k:03d}.{'jpg' if k % 2 else 'png'}")
    return root


@pytest.fixture
def damaged(folder, tmp_path):
    """The folder with one truncated JPEG, one non-image file named .png and one empty class
    folder in the training split."""
    root = tmp_path / "damaged"
    shutil.copytree(folder, root)
    jpg = root / "train" / "cat" / "001.jpg"
    jpg.write_bytes(jpg.read_bytes()[:-300])  # the header reads, the pixels do not
    (root / "train" / "dog" / "notes.png").write_text("not an image")
    for f in (root / "train" / "truck").iterdir():
        f.unlink()
    return root


def folder_config(lut_file, root, **extra):
    sets = [f"lut={lut_file}", "space=tiny", f"data.dir={root}", "data.kind=folder",
            "data.loader=stream", "data.workers=2", "data.batch_size=16",
            "data.eval_batch_size=64", "search.epochs=2", "search.warmup_epochs=0",
            "run.threads=1", "run.progress=false", "run.device=cpu"]
    sets += [f"{k}={v}" for k, v in extra.items()]
    return load_config(None, sets)


def batches(index, workers, epoch=1, train=True):
    n = len(index.train)
    ld = StreamLoader(index.train.files, index.train.labels, torch.arange(n), 16, train=train,
                      seed=3, drop_last=True, mean=(0.5,) * 3, std=(0.25,) * 3, size=32,
                      workers=workers)
    ld.set_epoch(epoch)
    return list(ld)


def test_workers_change_nothing_but_the_epoch_does(folder):
    index = scan_folder(folder)
    assert len(index.train) == 10 * PER_CLASS and index.classes[0] == "airplane"
    none, two = batches(index, 0), batches(index, 2)
    assert len(none) == len(two) == 10 * PER_CLASS // 16
    for (xa, ya), (xb, yb) in zip(none, two):
        assert xa.shape == (16, 3, 32, 32) and xa.dtype == torch.float32
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    other = batches(index, 2, epoch=2)
    assert not torch.equal(none[0][0], other[0][0])
    # evaluation is unaugmented and in order: the same whatever the epoch
    assert torch.equal(batches(index, 2, 1, train=False)[0][0],
                       batches(index, 0, 5, train=False)[0][0])


def test_crops_cover_the_documented_area_and_aspect():
    rng = np.random.default_rng(0)
    for _ in range(200):
        top, left, h, w = crop_box(375, 500, rng)
        assert 0 <= top <= 375 - h and 0 <= left <= 500 - w
        assert 0.08 * 375 * 500 * 0.97 <= h * w <= 375 * 500
        assert 3 / 4 * 0.97 <= w / h <= 4 / 3 * 1.03
    # a strip too thin for any try falls back to the central crop within the ratio range
    assert crop_box(10, 400, np.random.default_rng(1))[2:] == (10, 13)


def test_stats_are_estimated_on_a_fixed_sample(folder):
    index = scan_folder(folder)
    mean, std = sample_stats(index.train.files, 32)
    assert (mean, std) == sample_stats(index.train.files, 32)
    assert all(0.3 < m < 0.6 for m in mean) and all(0.15 < s < 0.35 for s in std)


def test_streamed_search_resumes_exactly_with_workers(folder, tiny_lut_file, tmp_path,
                                                      monkeypatch, ctrl_c_after):
    cfg = folder_config(tiny_lut_file, folder)
    run_search(cfg, tmp_path / "full", echo=quiet)
    log = (tmp_path / "full" / "train.log").read_text()
    assert "streamed at 32x32 by 2 worker process(es)" in log
    first = run_search(cfg, tmp_path / "split", stop_after=1, echo=quiet)
    assert first["stopped"]

    ctrl_c_after(3)
    assert run_search(cfg, tmp_path / "split", resume=True, echo=quiet)["stopped"]
    assert load_checkpoint(tmp_path / "split/checkpoints/last.pt")["position"] == 3
    monkeypatch.undo()
    run_search(cfg, tmp_path / "split", resume=True, echo=quiet)
    same_state(load_checkpoint(tmp_path / "full/checkpoints/last.pt"),
               load_checkpoint(tmp_path / "split/checkpoints/last.pt"))


def test_a_small_folder_stays_in_memory_unless_told(folder, tiny_lut_file, tmp_path):
    cfg = folder_config(tiny_lut_file, folder, **{"data.loader": "auto", "search.epochs": 1})
    run_search(cfg, tmp_path / "run", echo=quiet)
    log = (tmp_path / "run" / "train.log").read_text()
    assert "decoded into memory at 32x32 (decoded they would take 1 MB, within" in log


def test_bad_files_are_named_or_skipped_and_counted(damaged, tiny_lut_file, tmp_path):
    with pytest.raises(FbnasError, match="dog/notes.png cannot be read as an image.*skip_bad"):
        run_search(folder_config(tiny_lut_file, damaged), tmp_path / "a", echo=quiet)
    (damaged / "train" / "dog" / "notes.png").unlink()
    with pytest.raises(FbnasError, match="class folder .*truck has no readable images"):
        run_search(folder_config(tiny_lut_file, damaged), tmp_path / "b", echo=quiet)
    shutil.copy(damaged / "test" / "truck" / "000.png", damaged / "train" / "truck")
    with pytest.raises(FbnasError, match="image .*cat/001.jpg cannot be decoded .*skip_bad"):
        run_search(folder_config(tiny_lut_file, damaged), tmp_path / "c", echo=quiet)

    (damaged / "train" / "truck" / "000.png").unlink()
    (damaged / "train" / "dog" / "notes.png").write_text("not an image")
    cfg = folder_config(tiny_lut_file, damaged, **{"data.skip_bad": "true", "search.epochs": 1,
                                                   "data.val_fraction": 0.5})
    result = run_search(cfg, tmp_path / "d", echo=quiet)
    assert result["epochs_done"] == 1
    log = (tmp_path / "d" / "train.log").read_text()
    assert "skipped 2 unreadable file(s) or empty class folder(s)" in log  # at the scan
    assert "cat/001.jpg: cannot be decoded" in log  # when a loader reached it
    # the empty class keeps its id: truck's test images are still labelled 9
    index = scan_folder(damaged, skip_bad=True)
    assert index.classes[9] == "truck" and index.test.labels[-1] == 9
    assert 9 not in index.train.labels.tolist()


def test_each_rank_reads_its_own_shard(folder):
    index = scan_folder(folder)
    n = len(index.train)
    seen = []
    for rank in range(2):
        ld = StreamLoader(index.train.files, index.train.labels, torch.arange(n), 8, train=True,
                          seed=0, drop_last=True, mean=(0.5,) * 3, std=(0.25,) * 3, size=32,
                          rank=rank, world_size=2)
        ld.set_epoch(3)
        seen.append(set(ld.epoch_indices().tolist()))
        assert len(seen[-1]) == n // 2
    assert not seen[0] & seen[1]


def test_class_subset_command_and_class_list(folder, tmp_path):
    from click.testing import CliRunner

    from fbnas.cli import main

    out, link = tmp_path / "five.txt", tmp_path / "five"
    res = CliRunner().invoke(main, ["classes", str(folder), "--num", "5", "--seed", "1",
                                    "--out", str(out), "--link", str(link)])
    assert res.exit_code == 0, res.output
    names = [ln for ln in out.read_text().splitlines() if not ln.startswith("#")]
    assert len(names) == 5 and names == sorted(names)
    again = tmp_path / "again.txt"
    CliRunner().invoke(main, ["classes", str(folder), "--num", "5", "--seed", "1", "--out",
                              str(again)])
    assert again.read_text() == out.read_text()  # the same copy and seed, the same classes
    linked = scan_folder(link)
    assert linked.classes == names and len(linked.test) == 5 * TEST_PER_CLASS
    listed = scan_folder(folder, classes=names[::-1])  # the list's order gives the ids
    assert listed.classes == names[::-1] and set(listed.train.labels.tolist()) == set(range(5))
    res = CliRunner().invoke(main, ["classes", str(folder), "--num", "11", "--out",
                                    str(tmp_path / "x.txt")])
    assert res.exit_code != 0 and "fewer than the 11 asked for" in res.stderr
    res = CliRunner().invoke(main, ["classes", str(folder), "--num", "5", "--out", str(out)])
    assert res.exit_code != 0 and "--force" in res.stderr


def test_train_on_a_damaged_folder_is_one_line(damaged, tiny_lut_file, tmp_path):
    from click.testing import CliRunner

    from fbnas.cli import main
    from tests.arch.test_arch import assert_user_error

    args = ["train", "--space", "tiny", "--lut", str(tiny_lut_file), "--data-dir", str(damaged),
            "--out", str(tmp_path / "run"), "--epochs", "1", "--set", "data.kind=folder"]
    assert_user_error(CliRunner().invoke(main, args), "notes.png", "data.skip_bad")
    (damaged / "train" / "dog" / "notes.png").unlink()
    res = CliRunner().invoke(main, args + ["--set", "data.resolution=48",
                                           "--set", "data.skip_bad=true"])
    assert_user_error(res, "48x48", "expects 32x32", "data.resolution")


def test_a_resumed_epoch_does_not_decode_the_batches_it_discards(folder, monkeypatch):
    import fbnas.data.stream as stream

    index = scan_folder(folder)
    full = batches(index, 0)
    decoded = []
    real = stream.open_rgb
    monkeypatch.setattr(stream, "open_rgb", lambda p: decoded.append(p) or real(p))
    n = len(index.train)
    ld = StreamLoader(index.train.files, index.train.labels, torch.arange(n), 16, train=True,
                      seed=3, drop_last=True, mean=(0.5,) * 3, std=(0.25,) * 3, size=32)
    ld.set_epoch(1)
    ld.skip_leading([2])
    got = list(ld)
    assert got[:2] == [None, None] and len(decoded) == 16 * (len(full) - 2)
    for (xa, ya), (xb, yb) in zip(full[2:], got[2:]):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert all(b is not None for b in ld)  # the skips were for one iteration only
