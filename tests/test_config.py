import pytest

from fbnas.config import load_config
from fbnas.errors import FbnasError, UsageError


def test_defaults_are_the_papers():
    cfg = load_config()
    assert (cfg.loss.alpha, cfg.loss.beta) == (0.2, 0.6)
    assert cfg.optim.weights.lr == 0.1 and cfg.optim.weights.momentum == 0.9
    assert cfg.optim.weights.weight_decay == 1e-4
    assert cfg.optim.theta.lr == 0.01 and cfg.optim.theta.weight_decay == 5e-4
    assert cfg.search.temperature.initial == 5.0 and cfg.search.temperature.decay == 0.045
    assert cfg.data.theta_fraction == 0.2
    assert cfg.warmup_epochs == 9  # 10% of 90


def test_file_then_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("search:\n  epochs: 4\noptim:\n  weights:\n    lr: 0.2\n")
    cfg = load_config(p, ["optim.weights.lr=5e-2", "search.mode=hard", "run.threads=2"])
    assert cfg.search.epochs == 4 and cfg.optim.weights.lr == 0.05
    assert cfg.search.mode == "hard" and cfg.run.threads == 2
    assert cfg.warmup_epochs == 0  # round(0.4)


@pytest.mark.parametrize("override,message", [
    ("optim.weights.lrr=0.1", "unknown config key optim.weights.lrr"),
    ("search.epochs=ten", "search.epochs must be an integer"),
    ("search.mode=medium", "search.mode must be one of soft, hard"),
    ("data.augment=3", "data.augment must be true or false"),
    ("loss.form=target", "loss.target_ms"),
    ("search.warmup_epochs=200", "warmup_epochs"),
    ("novalue", "expected key=value"),
])
def test_bad_values_name_the_key(override, message):
    with pytest.raises(UsageError, match=message):
        load_config(None, [override])


def test_bad_yaml_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("- a list\n")
    with pytest.raises(UsageError, match="mapping"):
        load_config(p)


def test_binary_config_file_is_one_line_error(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"\xff\xfe\x00binary\x9c")
    with pytest.raises(FbnasError, match="not a text file"):
        load_config(p)
