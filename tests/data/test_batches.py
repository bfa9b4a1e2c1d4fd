"""The in-memory loader: augmentation, normalisation, seeded order, batching and sharding."""

import pytest
import torch

from fbnas.data.batches import BatchLoader, augment, normalize
from fbnas.data.memory import load_dataset
from fbnas.data.splits import make_splits
from fbnas.errors import FbnasError
from tests.conftest import CIFAR_SUBSET as SUBSET

torch.set_num_threads(1)


# --------------------------------------------------------------------------- augmentation


def crop_matches(img, out, padding):
    """All (dy, dx, flipped) whose padded crop of ``img`` equals ``out``."""
    h, w = img.shape[-2:]
    p = torch.nn.functional.pad(img, (padding,) * 4)
    found = []
    for dy in range(2 * padding + 1):
        for dx in range(2 * padding + 1):
            crop = p[:, dy:dy + h, dx:dx + w]
            for flipped, cand in ((False, crop), (True, crop.flip(-1))):
                if torch.equal(cand, out):
                    found.append((dy, dx, flipped))
    return found


def test_augment_crops_and_flips_each_image_independently():
    x = torch.randint(1, 256, (24, 3, 12, 12), dtype=torch.uint8)  # no zeros: padding shows
    out = augment(x, torch.Generator().manual_seed(0), padding=4)
    assert out.shape == x.shape and out.dtype == torch.uint8
    matches = [crop_matches(x[i], out[i], 4) for i in range(len(x))]
    assert all(len(m) == 1 for m in matches)
    offsets = {m[0][:2] for m in matches}
    assert len(offsets) > 5 and offsets != {(4, 4)}  # content really moves
    assert {m[0][2] for m in matches} == {True, False}
    shifted = [i for i, m in enumerate(matches) if m[0][0] == 0]
    assert shifted and all((out[i, :, :4] == 0).all() for i in shifted)  # zero padding enters


def test_flip_alone_mirrors_whole_images():
    x = torch.randint(0, 256, (32, 3, 8, 8), dtype=torch.uint8)
    out = augment(x, torch.Generator().manual_seed(1), padding=0)
    same = [torch.equal(out[i], x[i]) for i in range(32)]
    mirrored = [torch.equal(out[i], x[i].flip(-1)) for i in range(32)]
    assert all(s or m for s, m in zip(same, mirrored)) and any(same) and any(mirrored)
    assert torch.equal(augment(x, torch.Generator().manual_seed(1), padding=0, flip=False), x)


def test_augment_is_deterministic_per_generator_seed():
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    a = augment(x, torch.Generator().manual_seed(5))
    b = augment(x, torch.Generator().manual_seed(5))
    c = augment(x, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


# --------------------------------------------------------------------------- loader


def toy(n=40, size=8):
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    return images, torch.arange(n)  # labels double as image ids


def loader(images, labels, indices, **kw):
    args = dict(batch_size=8, train=True, seed=0, drop_last=False,
                mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    args.update(kw)
    return BatchLoader(images, labels, indices, **args)


def test_eval_loader_serves_normalised_images_in_order():
    images, labels = toy()
    idx = torch.tensor([5, 1, 7, 30, 2, 9, 11, 12, 13, 0, 3])
    ld = loader(images, labels, idx, train=False, batch_size=4)
    batches = list(ld)
    assert len(ld) == len(batches) == 3 and [len(y) for _, y in batches] == [4, 4, 3]
    x = torch.cat([b[0] for b in batches])
    assert x.dtype == torch.float32 and torch.equal(torch.cat([b[1] for b in batches]), idx)
    mean = torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)
    std = torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
    ref = (images[idx].float() / 255 - mean) / std
    assert torch.allclose(x, ref, atol=1e-5)
    assert torch.allclose(normalize(images[idx], (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)), ref,
                          atol=1e-5)


def test_train_batches_depend_only_on_seed_and_epoch():
    images, labels = toy()
    idx = torch.arange(3, 40)
    a = loader(images, labels, idx)
    a.set_epoch(3)
    first = list(a)
    again = list(a)
    resumed = loader(images, labels, idx)  # a fresh process resuming at epoch 3
    resumed.set_epoch(3)
    for (x1, y1), (x2, y2), (x3, y3) in zip(first, again, list(resumed)):
        assert torch.equal(x1, x2) and torch.equal(x1, x3) and torch.equal(y1, y3)
    a.set_epoch(4)
    assert not torch.equal(torch.cat([y for _, y in a]), torch.cat([y for _, y in first]))
    other_seed = loader(images, labels, idx, seed=1)
    other_seed.set_epoch(3)
    assert not torch.equal(next(iter(other_seed))[1], first[0][1])
    # Every training index is served once per epoch, shuffled.
    served = torch.cat([y for _, y in first])
    assert torch.equal(served.sort().values, idx) and not torch.equal(served, idx)
    assert first[0][0].shape == (8, 3, 8, 8) and len(a) == 5


def test_drop_last_drops_the_short_batch():
    images, labels = toy()
    ld = loader(images, labels, torch.arange(37), drop_last=True)
    assert len(ld) == 4 and [len(y) for _, y in ld] == [8, 8, 8, 8]


def test_sharded_ranks_get_disjoint_equal_parts():
    images, labels = toy()
    idx = torch.arange(40)
    parts = []
    for rank in range(2):
        ld = loader(images, labels, idx, rank=rank, world_size=2, batch_size=6)
        ld.set_epoch(2)
        parts.append(torch.cat([y for _, y in ld]))
        assert len(ld) == 4
    assert len(parts[0]) == len(parts[1]) == 20
    assert not set(parts[0].tolist()) & set(parts[1].tolist())
    assert torch.equal(torch.cat(parts).sort().values, idx)
    # An odd count is padded with one repeat (or trimmed with drop_last) to stay even.
    odd = torch.arange(1, 40)
    padded = [loader(images, labels, odd, rank=r, world_size=2).epoch_indices() for r in (0, 1)]
    assert len(padded[0]) == len(padded[1]) == 20
    assert set(torch.cat(padded).tolist()) == set(odd.tolist())
    trimmed = [loader(images, labels, odd, rank=r, world_size=2, drop_last=True).epoch_indices()
               for r in (0, 1)]
    assert len(trimmed[0]) == len(trimmed[1]) == 19
    assert not set(trimmed[0].tolist()) & set(trimmed[1].tolist())


def test_loader_refuses_a_split_too_small_for_one_batch():
    images, labels = toy()
    with pytest.raises(FbnasError, match="5 images make no batch of 8"):
        loader(images, labels, torch.arange(5), drop_last=True)


@pytest.mark.slow  # reads the CIFAR-10 subset
@pytest.mark.usefixtures("cifar_subset")
def test_loader_on_the_real_subset():
    ds = load_dataset(SUBSET)
    splits = make_splits(len(ds.train_labels), seed=0)
    ld = BatchLoader(ds.train_images, ds.train_labels, splits["theta"], 64, True, 0, True,
                     ds.mean, ds.std)
    x, y = next(iter(ld))
    assert x.shape == (64, 3, 32, 32) and y.shape == (64,)
    assert set(y.tolist()) <= set(range(10))
    assert -2.5 < float(x.mean()) < 2.5 and 0.5 < float(x.std()) < 2.0
