"""Inputs that break parsers or optimizers rather than fbnas's own checks: each is a
one-line error naming the key or file, never a traceback, and never silently accepted."""

from __future__ import annotations

import pytest

from fbnas.config import load_config
from fbnas.errors import FbnasError, UsageError
from fbnas.io import write_json
from tests.test_arch import assert_user_error, cli

HUGE = "9" * 5000  # beyond Python's 4300-digit conversion limit


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path):
    """The safe loader keeps the last value silently: 500 epochs ran instead of 3."""
    path = tmp_path / "c.yaml"
    path.write_text("search:\n  epochs: 3\n  mode: hard\n  epochs: 500\n")
    with pytest.raises(FbnasError, match="'epochs' is given twice") as e:
        load_config(path)
    assert "line 4" in str(e.value) and "\n" not in str(e.value)
    # the same key in two different mappings is fine
    path.write_text("search:\n  epochs: 3\nretrain:\n  epochs: 4\n")
    assert load_config(path).search.epochs == 3


def test_a_key_given_twice_in_a_space_file_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nname: t\n")
    assert_user_error(cli("profile", "--space", path, "--out", tmp_path / "t.json"),
                      "given twice")


@pytest.mark.parametrize("text", [f"search:\n  epochs: {HUGE}\n", "x: " + "[" * 20000 + "]" * 20000])
def test_unreadable_numbers_and_nesting_in_a_config(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(FbnasError) as e:
        load_config(path)
    assert "\n" not in str(e.value) and ("digits" in str(e.value) or "nested" in str(e.value))


def test_huge_integers_in_overrides_and_fields():
    with pytest.raises(UsageError, match="--set search.epochs"):
        load_config(None, [f"search.epochs={HUGE}"])
    with pytest.raises(UsageError, match="search.epochs is too large"):
        load_config(None, [f"search.epochs={'9' * 30}"])


@pytest.mark.parametrize("text,what", [
    ('{"schema": ' + HUGE + '}', "digits"),
    ("[" * 100000 + "]" * 100000, "nested"),
])
def test_unreadable_numbers_and_nesting_in_a_table_or_definition(tmp_path, text, what):
    path = tmp_path / "t.json"
    path.write_text(text)
    assert_user_error(cli("show-lut", path), "t.json", what)
    assert_user_error(cli("summary", path), "t.json", what)


@pytest.mark.parametrize("override,key", [
    ("optim.weights.momentum=-1", "optim.weights.momentum"),
    ("optim.weights.momentum=1", "optim.weights.momentum"),
    ("optim.weights.weight_decay=-1", "optim.weights.weight_decay"),
    ("optim.theta.weight_decay=-0.1", "optim.theta.weight_decay"),
    ("optim.theta.beta1=1.5", "optim.theta.beta1"),
    ("optim.theta.beta2=-0.5", "optim.theta.beta2"),
    ("optim.weights.lr=1e300", "optim.weights.lr"),
    ("optim.theta.lr=1e39", "optim.theta.lr"),
    ("optim.weights.min_lr=-1", "optim.weights.min_lr"),
])
def test_optimizer_settings_torch_would_reject_name_the_key(override, key):
    with pytest.raises(UsageError, match=key):
        load_config(None, [override])


def test_nesterov_without_momentum_names_both_fixes():
    with pytest.raises(UsageError, match="nesterov.*momentum"):
        load_config(None, ["optim.weights.nesterov=true", "optim.weights.momentum=0"])
    assert load_config(None, ["optim.weights.nesterov=true"]).optim.weights.nesterov


def test_train_refuses_these_before_any_work(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  theta: {beta1: 1.5}\n")
    assert_user_error(cli("train", "--config", path, "--out", tmp_path / "run"),
                      "optim.theta.beta1")
    assert not (tmp_path / "run").exists()
