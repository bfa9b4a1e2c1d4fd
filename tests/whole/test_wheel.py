"""The package as a user installs it: build the wheel, install it into a fresh environment,
and run `fbnas profile --space tiny`, `fbnas summary fbnet_c` and a one-epoch search with the
bundled budget recipe from a folder outside the checkout.

The fresh environment gets fbnas from the wheel only; its dependencies (torch and the rest)
come from this interpreter's site-packages through a .pth file, so nothing is downloaded.
Neither the checkout nor an editable install of it is on the fresh environment's path.
"""

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import fbnas
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def sh(*args, cwd, env=None, ok=True):
    r = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=600)
    if ok:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def build_wheel(tmp: Path) -> Path:
    """Build from a copy of the sources, so the checkout gets no build/ or egg-info."""
    src = tmp / "src"
    shutil.copytree(REPO / "fbnas", src / "fbnas",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
       "--disable-pip-version-check", "-q", "-w", tmp / "dist", src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("fbnas-*.whl")
    return wheel


def dependency_dirs() -> list[str]:
    """This interpreter's site-packages folders, minus any that hold fbnas itself."""
    return [p for p in sys.path
            if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()
            and not (Path(p) / "fbnas").exists()]


def test_wheel_installs_and_profiles_from_another_folder(tmp_path, cifar_subset):
    wheel = build_wheel(tmp_path)
    assert wheel.name == f"fbnas-{fbnas.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    for f in ("fbnas/spaces/tiny.yaml", "fbnas/spaces/fbnet_cifar.yaml",
              "fbnas/configs/tiny.yaml", "fbnas/configs/fbnet_cifar.yaml",
              "fbnas/configs/budget.yaml",
              "fbnas/archs/fbnet_a.json", "fbnas/archs/fbnet_b.json", "fbnas/archs/fbnet_c.json"):
        assert f in names, f
    # every module of every subpackage: a subpackage the package finder missed would only
    # show when a command imports it
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "fbnas").rglob("*.py")}
    assert not modules - set(names), sorted(modules - set(names))

    env_dir = tmp_path / "fresh"
    sh(sys.executable, "-m", "venv", "--without-pip", env_dir, cwd=tmp_path)
    py, fbnas_script = env_dir / "bin" / "python", env_dir / "bin" / "fbnas"
    sh(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index",
       "--disable-pip-version-check", "-q", wheel, cwd=tmp_path)
    site = sh(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
              cwd=tmp_path).stdout.strip()
    (Path(site) / "fbnas_test_deps.pth").write_text("\n".join(dependency_dirs()) + "\n")

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "OMP_NUM_THREADS": "1"}
    where = sh(py, "-c", "import fbnas; print(fbnas.__file__)", cwd=work, env=env).stdout
    assert Path(where.strip()).is_relative_to(env_dir), where
    r = sh(fbnas_script, "--version", cwd=work, env=env)
    assert fbnas.__version__ in r.stdout
    r = sh(fbnas_script, "profile", "--space", "tiny", "--runtime", "eager", "--out", "tiny.json",
           "--rounds", 1, "--extra-time", 0, "--block-time", 0.001, cwd=work, env=env)
    table_out = r.stdout
    table = json.loads((work / "tiny.json").read_text())
    assert table["space"]["name"] == "tiny" and len(table["layers"]) == 4
    assert "fastest non-skip" in r.stdout
    # a bundled architecture by name
    r = sh(fbnas_script, "summary", "fbnet_c", cwd=work, env=env)
    assert "MACs" in r.stdout and "published: FBNet-C" in r.stdout
    # a bundled config by name, and without data the one-line question for --data-dir
    r = sh(fbnas_script, "train", "--config", "tiny", "--lut", "tiny.json", "--out", "run",
           cwd=work, env=env, ok=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr + r.stdout
    assert "data/cifar10 does not exist" in r.stderr + r.stdout and "--data-dir" in r.stderr
    # the bundled budget recipe on a bundled space other than the one it was measured on:
    # one epoch (the recipe's weights-only half of one epoch is none) under a budget halfway
    # across the table's range
    low, high = map(float, re.search(r"network latency by the table: ([\d.]+) \.\. ([\d.]+) ms",
                                     table_out).groups())
    r = sh(fbnas_script, "train", "--config", "budget", "--space", "tiny", "--lut", "tiny.json",
           "--target-ms", f"{(low + high) / 2:.3f}", "--data-dir", cifar_subset, "--epochs", 1,
           "--threads", 1, "--out", "budget", cwd=work,
           env=env)
    assert "best NASWOT, theta and one-shot among the fewest skip of " in r.stdout and " checked" in r.stdout, r.stdout[-2000:]
    assert "done: 1 epochs" in r.stdout and (work / "budget" / "config.yaml").is_file()
