"""The whole chain through the CLI: profile -> train -> sample -> build -> retrain ->
latency -> summary -> export, on the tiny space and the real CIFAR-10 subset."""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import fbnas
from fbnas.cli import main
from fbnas.runs.checkpoint import load_checkpoint
from tests.conftest import CIFAR_SUBSET

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cifar_subset")]


def cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


def test_profile_train_sample_retrain_export(tmp_path):
    lut = tmp_path / "tiny.json"
    # eager keeps this test quick; tests/latency/test_onnx_runtime.py covers onnxruntime tables
    cli("profile", "--space", "tiny", "--runtime", "eager", "--out", lut, "--rounds", 1,
        "--extra-time", 0.05, "--block-time", 0.005)
    run = tmp_path / "search"
    common = ["--data-dir", CIFAR_SUBSET, "--threads", 1, "--set", "data.limit=600",
              "--set", "data.batch_size=32", "--set", "run.progress=false"]
    out = cli("train", "--space", "tiny", "--lut", lut, "--out", run, "--epochs", 2,
              "--set", "search.warmup_epochs=1", *common)
    assert "epoch 2/2" in out and "test set" in out

    out = cli("sample", run, "--hard")
    arch = run / "arch.json"
    data = json.loads(arch.read_text())
    name = next(iter(data["architectures"]))
    theta = load_checkpoint(run)["theta"]
    ops = [b["op"] for b in data["architectures"][name]["blocks"]]
    cands = load_checkpoint(run)["candidates"]
    assert ops == [c[int(t.argmax())] for c, t in zip(cands, theta)]

    model = fbnas.build_model(arch, name)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)

    rt = tmp_path / "retrain"
    out = cli("retrain", arch, "--name", name, "--out", rt, "--epochs", 1, *common)
    assert "test top1" in out
    ckpt = load_checkpoint(rt)
    assert ckpt["kind"] == "model" and ckpt["definition"]["blocks"] == data["architectures"][name]["blocks"]

    out = cli("latency", arch, "--name", name, "--lut", lut, "--rounds", 1, "--block-time", 0.01)
    assert "measured" in out and "predicted" in out
    out = cli("summary", arch, "--name", name, "--lut", lut)
    assert "total" in out
    pt2 = tmp_path / "m.pt2"
    out = cli("export", arch, "--name", name, "--weights", rt / "checkpoints/last.pt",
              "--format", "pt2", "--out", pt2)
    assert pt2.is_file() and "matches eager" in out


def test_retrain_resume_equals_one_go(tmp_path, tiny_lut_data):
    from fbnas.arch.space import load_space
    from fbnas.config import load_config
    from fbnas.runs.retrain import run_retrain

    space = load_space("tiny")
    defn = space.definition([l.candidates[0] for l in space.layers], name="first")
    arch = tmp_path / "a.json"
    arch.write_text(json.dumps(defn))
    cfg = load_config(None, [f"retrain.arch={arch}", f"data.dir={CIFAR_SUBSET}",
                             "data.limit=300", "data.batch_size=32", "retrain.epochs=2",
                             "run.threads=1", "run.progress=false", "run.device=cpu"])
    run_retrain(cfg, tmp_path / "full", echo=lambda m: None)
    run_retrain(cfg, tmp_path / "split", stop_after=1, echo=lambda m: None)
    run_retrain(cfg, tmp_path / "split", resume=True, echo=lambda m: None)
    a, b = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "split")
    assert a["epoch"] == b["epoch"] == 2
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


def test_retrain_clips_the_gradient_norm(tmp_path):
    """retrain.clip_grad_norm bounds every step's total gradient norm; 0 leaves it alone."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from fbnas.arch.space import load_space
    from fbnas.config import load_config
    from fbnas.runs.retrain import run_retrain

    space = load_space("tiny")
    arch = tmp_path / "a.json"
    arch.write_text(json.dumps(space.definition([l.candidates[0] for l in space.layers], "a")))

    def step_norms(clip):
        norms = []

        def record(opt, args, kwargs):
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            norms.append(float(torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(g) for g in grads]))))

        cfg = load_config(None, [f"retrain.arch={arch}", f"data.dir={CIFAR_SUBSET}",
                                 "data.limit=200", "data.batch_size=32", "retrain.epochs=1",
                                 f"retrain.clip_grad_norm={clip}", "run.threads=1",
                                 "run.progress=false", "run.device=cpu"])
        handle = register_optimizer_step_pre_hook(record)
        try:
            run_retrain(cfg, tmp_path / f"clip{clip}", echo=lambda m: None)
        finally:
            handle.remove()
        return norms

    free, clipped = step_norms(0), step_norms(0.05)
    assert len(free) == len(clipped) > 0
    assert max(free) > 0.05  # the bound below is not met by accident
    assert max(clipped) <= 0.05 * (1 + 1e-4)


def test_retrain_clip_must_not_be_negative():
    from fbnas.config import load_config
    from fbnas.errors import FbnasError

    with pytest.raises(FbnasError, match="retrain.clip_grad_norm must be >= 0"):
        load_config(None, ["retrain.clip_grad_norm=-1"])


def _retrain_tiny(tmp_path, name: str, *sets: str, ops: list[str] | None = None) -> dict:
    from fbnas.arch.space import load_space
    from fbnas.config import load_config
    from fbnas.runs.retrain import run_retrain

    space = load_space("tiny")
    arch = tmp_path / "a.json"
    ops = ops or [l.candidates[1] for l in space.layers]
    arch.write_text(json.dumps(space.definition(ops, "a")))
    cfg = load_config(None, [f"retrain.arch={arch}", f"data.dir={CIFAR_SUBSET}",
                             "data.limit=200", "data.batch_size=32", "retrain.epochs=1",
                             "run.threads=1", "run.progress=false", "run.device=cpu", *sets])
    run_retrain(cfg, tmp_path / name, echo=lambda m: None)
    return load_checkpoint(tmp_path / name)


def test_retrain_memory_format_changes_rounding_only(tmp_path):
    """channels_last (the default) trains the same network as NCHW up to float rounding, and
    its checkpoint holds the same weights, in whichever layout, under the same keys."""
    nhwc = _retrain_tiny(tmp_path, "nhwc")
    nchw = _retrain_tiny(tmp_path, "nchw", "retrain.memory_format=contiguous")
    assert nhwc["config"]["retrain"]["memory_format"] == "channels_last"
    assert nhwc["model"].keys() == nchw["model"].keys()
    convs = [k for k, v in nhwc["model"].items() if v.dim() == 4]
    assert any(nhwc["model"][k].is_contiguous(memory_format=torch.channels_last)
               and not nhwc["model"][k].is_contiguous() for k in convs)
    for k in nhwc["model"]:
        assert torch.allclose(nhwc["model"][k].float(), nchw["model"][k].float(),
                              rtol=1e-3, atol=1e-4), k
    a, b = nhwc["history"][-1], nchw["history"][-1]
    assert abs(a["weights_ce"] - b["weights_ce"]) < 1e-4


def test_retrain_fold_bn_changes_rounding_only(tmp_path):
    """retrain.fold_bn (on a CPU) trains the same network as torch's BN up to float
    rounding: the same weights and running statistics under the same keys."""
    ops = ["k3_e3"] * 4  # expansion 3 of 8 to 24 channels: where the fold applies
    folded = _retrain_tiny(tmp_path, "folded", "retrain.fold_bn=true", ops=ops)
    plain = _retrain_tiny(tmp_path, "plain", ops=ops)
    assert folded["config"]["retrain"]["fold_bn"] is True
    assert folded["model"].keys() == plain["model"].keys()
    assert any(not torch.equal(v, plain["model"][k]) for k, v in folded["model"].items())
    for k in folded["model"]:
        assert torch.allclose(folded["model"][k].float(), plain["model"][k].float(),
                              rtol=1e-3, atol=1e-4), k
    a, b = folded["history"][-1], plain["history"][-1]
    assert abs(a["weights_ce"] - b["weights_ce"]) < 1e-4


def test_kept_memory_changes_no_result(tmp_path):
    """run.keep_freed_memory serves tensors from reused heap memory instead of fresh zeroed
    pages: each setting's retrain, in a fresh process of its own, ends on the same weights
    to the bit (nothing reads memory it did not write)."""
    import subprocess
    import sys

    def weights(keep: str) -> dict:
        code = ("import sys; from pathlib import Path; from tests.whole.test_chain import "
                "_retrain_tiny; _retrain_tiny(Path(sys.argv[1]), 'r', sys.argv[2])")
        out = tmp_path / keep
        out.mkdir()
        subprocess.run([sys.executable, "-c", code, str(out),
                        f"run.keep_freed_memory={keep}"], check=True,
                       cwd=Path(__file__).resolve().parents[2])
        return load_checkpoint(out / "r")["model"]

    kept, released = weights("true"), weights("false")
    assert kept.keys() == released.keys()
    assert all(torch.equal(kept[k], released[k]) for k in kept)


@pytest.mark.parametrize("precision", ["bf16", "bf16_products"])
def test_retrain_in_bf16_trains_like_fp32(tmp_path, precision):
    """run.precision: bf16 autocasts the training forward, bf16_products runs the 1x1 convs
    as bfloat16 products: other rounding, the same course (mean training CE of the epoch
    within 0.05 of fp32's), fp32 weights saved."""
    bf16 = _retrain_tiny(tmp_path, precision, f"run.precision={precision}")
    fp32 = _retrain_tiny(tmp_path, "fp32")
    assert all(v.dtype == torch.float32 for v in bf16["model"].values() if v.is_floating_point())
    a, b = bf16["history"][-1]["weights_ce"], fp32["history"][-1]["weights_ce"]
    assert a != b and abs(a - b) < 0.05
