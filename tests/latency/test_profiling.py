"""fbnas.latency.profiling: the three profile modes, called without the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fbnas.errors import UsageError
from fbnas.latency.profiling import check_mode, default_jobs, profile_here


def check(given=(), out=None, bundle=None, precision="fp32", data_dir=None,
          from_results=None, n=0):
    flags = {name: "--" + name.replace("_", "-") for name in given}
    flags = {k: ("--check" if k == "check_n" else v) for k, v in flags.items()}
    check_mode(flags, out, bundle, precision, data_dir, from_results, n)


@pytest.mark.parametrize("kwargs, message", [
    ({"bundle": Path("b"), "from_results": Path("r")}, "pick one"),
    ({"bundle": Path("b"), "given": ["threads"]}, "--threads does not apply to --bundle"),
    ({"bundle": Path("b"), "out": Path("t.json")}, "drop --out"),
    ({"bundle": Path("b"), "data_dir": "d"}, "add --precision int8"),
    ({"out": Path("t.json"), "given": ["jobs"]}, "--jobs does not apply without --bundle"),
    ({"from_results": Path("r"), "out": Path("t"), "given": ["seed"]},
     "--seed does not apply to --from-results"),
    ({"from_results": Path("r")}, "--from-results needs --out"),
    ({}, "give --out TABLE"),
    ({"out": Path("t.json"), "n": 3}, "at least 5"),
])
def test_check_mode_refuses_options_of_another_mode(kwargs, message):
    with pytest.raises(UsageError, match=message):
        check(**kwargs)


def test_check_mode_lets_each_mode_through():
    check(["precision", "data_dir", "jobs"], bundle=Path("b"), precision="int8", data_dir="d")
    check(["out"], from_results=Path("r"), out=Path("t.json"))
    check(["threads", "check_n"], out=Path("t.json"), n=5)


def test_default_jobs_is_the_usable_cores_at_most_8():
    assert 1 <= default_jobs() <= 8


def test_profile_here_writes_the_table_and_reports_it(tmp_path):
    out, lines = tmp_path / "tiny.json", []
    data = profile_here("tiny", out, "eager", rounds=1, extra_time=0.0, block_time=0.002,
                        echo=lines.append)
    assert json.loads(out.read_text())["space"]["name"] == "tiny" == data["space"]["name"]
    assert lines[-1] == f"wrote {out}" and "fastest non-skip" in lines[-2]
    with pytest.raises(Exception, match="--force"):
        profile_here("tiny", out, "eager", rounds=1, extra_time=0.0, block_time=0.002,
                     echo=lines.append)
