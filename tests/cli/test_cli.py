import json

import pytest
from click.testing import CliRunner

import fbnas
from fbnas.cli import main


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_help_and_version():
    r = run("--help")
    assert r.exit_code == 0 and "profile" in r.output
    r = run("--version")
    assert r.exit_code == 0 and fbnas.__version__ in r.output
    for cmd in ("profile", "calibrate", "show-lut", "train", "sample", "pick", "retrain",
                "latency", "summary", "export"):
        r = run(cmd, "--help")
        assert r.exit_code == 0 and "Example" in r.output, cmd


def test_usage_error_exit_code_2():
    r = run("profile", "--space", "tiny")
    assert r.exit_code == 2 and "--out" in r.output


def test_profile_tiny_end_to_end_and_refuses_overwrite(tmp_path):
    out = tmp_path / "tiny.json"
    r = run("profile", "--space", "tiny", "--runtime", "eager", "--out", out, "--rounds", 1,
            "--extra-time", 0.05, "--block-time", 0.002)
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["space"]["name"] == "tiny" and len(data["layers"]) == 4
    assert "fastest non-skip" in r.output and "runner-up" in r.output
    r = run("profile", "--space", "tiny", "--runtime", "eager", "--out", out, "--rounds", 1,
            "--extra-time", 0.05, "--block-time", 0.002)
    assert r.exit_code == 1 and "--force" in r.output and "Traceback" not in r.output
    r = run("show-lut", out, "--space", "tiny")
    assert r.exit_code == 0 and "4 layers" in r.output


def test_bad_inputs_are_one_line_errors(tmp_path, tiny_lut_file):
    r = run("profile", "--space", "nope", "--out", tmp_path / "x.json")
    assert r.exit_code == 1 and "unknown space 'nope'" in r.output
    assert not (tmp_path / "x.json").exists()
    r = run("show-lut", tiny_lut_file, "--space", "fbnet_cifar")
    assert r.exit_code == 1 and "profiled for space tiny" in r.output
    broken = tmp_path / "broken.json"
    broken.write_text("{\"schema\": ")
    r = run("show-lut", broken)
    assert r.exit_code == 1 and "not valid JSON" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = run("calibrate", tiny_lut_file, "--networks", 5, "--fit", 5)
    assert r.exit_code == 1 and "--fit" in r.output


def test_calibrate_stores_calibration_once(tiny_lut_file):
    r = run("calibrate", tiny_lut_file, "--networks", 5, "--fit", 3, "--rounds", 4,
            "--block-time", 0.005)
    assert r.exit_code == 0, r.output
    assert "calibrated table" in r.output
    assert "calibration" in json.loads(tiny_lut_file.read_text())
    r = run("calibrate", tiny_lut_file, "--networks", 5, "--fit", 3)
    assert r.exit_code == 1 and "--force" in r.output


@pytest.mark.slow  # a profile and its calibration, end to end
def test_profile_check_stores_calibration(tmp_path):
    out = tmp_path / "tiny.json"
    r = run("profile", "--space", "tiny", "--runtime", "eager", "--out", out, "--rounds", 1,
            "--extra-time", 0.05, "--block-time", 0.002, "--check", 5)
    assert r.exit_code == 0, r.output
    cal = json.loads(out.read_text())["calibration"]
    assert cal["networks_fit"] == 2 and cal["networks_test"] == 3
    r = run("profile", "--space", "tiny", "--out", tmp_path / "x.json", "--check", 3)
    assert r.exit_code == 2 and "at least 5" in r.output


def test_bundled_config_from_another_folder_asks_for_the_data_dir(tmp_path, tiny_lut_file,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the checkout: nothing there but the table
    r = run("train", "--config", "tiny", "--lut", tiny_lut_file, "--out", "run")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert "data directory data/cifar10 does not exist" in r.output and "--data-dir" in r.output
    r = run("train", "--config", "tiny", "--lut", tiny_lut_file, "--out", "run2",
            "--data-dir", tmp_path / "elsewhere")
    assert r.exit_code == 1 and f"{tmp_path}/elsewhere does not exist" in r.output


def test_train_reports_a_missing_data_folder_before_an_impossible_budget(tmp_path,
                                                                          tiny_lut_file):
    """Checks run in the order a user fixes them, as fbnas pick's do: the data, then the
    budget."""
    base = ["train", "--space", "tiny", "--lut", tiny_lut_file, "--target-ms", 1e-5]
    r = run(*base, "--out", tmp_path / "a", "--data-dir", tmp_path / "none")
    assert r.exit_code == 1 and f"{tmp_path}/none does not exist" in r.output
    assert "below the fastest" not in r.output


@pytest.mark.parametrize("folder", ["2024", "on", "null", "1e3"])
def test_data_dir_that_reads_as_yaml_is_a_folder_name(tmp_path, tiny_lut_file, monkeypatch,
                                                      folder):
    monkeypatch.chdir(tmp_path)
    r = run("train", "--config", "tiny", "--lut", tiny_lut_file, "--out", "run",
            "--data-dir", folder)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert f"data directory {folder} does not exist" in r.output and "must be" not in r.output


def test_retrain_name_that_reads_as_yaml_stays_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("retrain", "fbnet_a", "--name", "on", "--out", "run")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "has no architecture 'on'" in r.output and "must be a string" not in r.output
