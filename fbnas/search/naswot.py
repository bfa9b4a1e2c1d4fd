"""A training-free score of an architecture: how differently its untrained ReLUs split a batch.

NASWOT (Mellor et al., ICML 2021) scores a network before any training: run one batch through
it at initialisation, record for each image which ReLU units fire (a binary code), and take
log|K| where K[i, j] is the number of units on which images i and j agree. A network whose
units separate the images of one batch into distinct codes has a well-conditioned K and a
high score; one that maps many images to the same pattern cannot tell them apart, whatever
its weights become. The score needs no supernet and no labels, so it is free of the bias a
supernet trained for minutes carries (it ranks networks by how fast they learn).

On NAS-Bench-Macro it ranks networks against their true accuracy better than anything the
search's short training gives, MACs and one-shot top-1 included (``bench/bench_macro.py
report --naswot-window`` and ``score --rank``; docs/results.md). Each network is built and scored on the same batch
from the same seed, so the score is a function of the architecture and the images alone,
and a resumed or repeated search gets the same numbers.
"""

from __future__ import annotations

import torch
from torch import nn


#: how many images a score is taken on: K is IMAGES x IMAGES
IMAGES = 64


def _rows(out: torch.Tensor) -> torch.Tensor:
    """``out`` as one row of units per image, without a copy where its memory allows: the
    order of the units within a row does not matter to K."""
    n = out.shape[0]
    if (out.dim() == 4 and not out.is_contiguous()
            and out.is_contiguous(memory_format=torch.channels_last)):
        return out.permute(0, 2, 3, 1).reshape(n, -1)
    return out.reshape(n, -1)


def naswot(net: nn.Module, images: torch.Tensor) -> float:
    """log|K| of ``net``'s ReLU codes on ``images`` (one forward pass, no gradients).

    The net runs in training mode, so batch norm normalises with the batch's own statistics
    as it does at initialisation; its running statistics are restored afterwards. K is summed
    layer by layer as each ReLU fires, so memory holds one layer's codes at a time, not the
    whole network's (millions of units an image on the larger spaces).
    """
    n = images.shape[0]
    agree = torch.zeros(n, n, dtype=torch.float64)

    def record(_module, _inputs, out):
        # a ReLU's output is >= 0, so its sign is the 0/1 code, in one pass
        c = torch.sign(_rows(out.detach())).to(torch.float32).cpu()
        # units on which two images agree: the layer's units minus the Hamming distance of
        # the two codes; integer counts below 2^24, so the float32 products are exact, and
        # the diagonal of C C^T is how many units fired for each image
        both = c @ c.t()
        fired = both.diagonal()
        same = c.shape[1] - (fired[:, None] + fired[None, :] - 2.0 * both)
        agree.add_(same.double())

    relus = [m for m in net.modules() if isinstance(m, (nn.ReLU, nn.ReLU6))]
    if not relus:
        raise ValueError("the network has no ReLU units to score")
    hooks = [m.register_forward_hook(record) for m in relus]
    saved = {k: b.clone() for k, b in net.named_buffers()}
    mode = net.training
    try:
        net.train()
        with torch.no_grad():
            net(images)
    finally:
        for h in hooks:
            h.remove()
        net.train(mode)
        with torch.no_grad():
            for k, b in net.named_buffers():
                b.copy_(saved[k])
    return float(torch.linalg.slogdet(agree)[1])


def data_images(cfg, data) -> torch.Tensor:
    """The images networks are scored on: the data set's first ``IMAGES`` training images,
    un-augmented and normalised as training normalises them, on the CPU. The same whatever the
    run's seed or split, so that a network's score depends on its architecture and the data
    alone, and a bench can score networks without a run."""
    from fbnas.runs.loaders import loader

    n = min(IMAGES, len(data))
    batches = loader(cfg, data, "train", torch.arange(n), n, train=False, seed=0,
                     drop_last=False, mean=data.mean, std=data.std, rank=0, world_size=1,
                     device=torch.device("cpu"))
    images, _ = next(iter(batches))  # one batch of all n
    return images.float().cpu()


def score_architectures(space, architectures: list[list[str]], images: torch.Tensor,
                        seed: int = 0) -> list[float]:
    """The NASWOT score of each architecture of ``space`` (lists of op names), each built
    fresh from the same ``seed`` and scored on the same ``images``; the global random state is
    left as it was."""
    from fbnas.arch.model import Network

    # channels_last, where a CPU runs these convs fastest (docs/results.md); the same codes
    # but where BN's rounding tips a unit at zero, so scores differ from NCHW ones by
    # float rounding
    images = images.cpu().contiguous(memory_format=torch.channels_last)
    scores = []
    for ops in architectures:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = Network(space.definition(ops))
        scores.append(naswot(net.to(memory_format=torch.channels_last), images))
    return scores
