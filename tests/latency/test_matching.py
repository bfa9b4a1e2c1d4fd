"""An architecture against a lookup table: the fit is checked layer by layer, and a table
that does not fit says where."""

import copy

import pytest

from fbnas.arch.space import load_space
from fbnas.errors import FbnasError
from fbnas.latency.lut import LUT
from fbnas.latency.matching import match_lut, row_latencies, warn_other_machine

OPS = ["k3_e1", "skip", "k5_e1", "k3_e3"]


@pytest.fixture(scope="module")
def lut(tiny_lut_data):
    return LUT(tiny_lut_data)


def definition(ops=OPS) -> dict:
    space = load_space("tiny")
    defn = space.definition(list(ops), "hand")
    defn["space"] = {"name": space.name, "hash": space.hash}
    return defn


def refused(defn, lut) -> str:
    with pytest.raises(FbnasError) as e:
        match_lut(defn, lut, "hand")
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_fitting_architecture_gives_its_ops_and_per_row_latencies(lut):
    assert match_lut(definition(), lut) == OPS
    lats = row_latencies(definition(), lut)
    assert len(lats) == len(OPS) + 2  # stem, blocks, head
    assert sum(lats) == pytest.approx(lut.raw_sum(OPS))
    d = lut.data
    assert lats[0] == lut.entry(d["fixed"]["stem"])["median"]
    assert lats[2] == lut.entry(d["layers"][1]["candidates"]["skip"])["median"]
    bare = definition()
    del bare["space"]  # a hand-written definition records no space: only shapes are compared
    assert match_lut(bare, lut) == OPS


def test_another_space_is_named_with_both_hashes(lut):
    defn = definition()
    defn["space"] = {"name": "fbnet_cifar", "hash": "0123456789abcdef"}
    msg = refused(defn, lut)
    assert msg.startswith("hand is from space fbnet_cifar (hash 0123456789abcdef) but the "
                          "lookup table was profiled for space tiny (hash ")
    assert msg.endswith("pass the table of space fbnet_cifar with --lut")


def test_a_different_block_count_stem_or_shape_is_a_clear_mismatch(lut):
    defn = definition()
    del defn["space"]
    fewer = copy.deepcopy(defn)
    fewer["blocks"] = fewer["blocks"][:3]
    assert refused(fewer, lut).startswith("hand has 3 blocks but the lookup table has 4 layers")
    stem = copy.deepcopy(defn)
    stem["stem"]["channels"] = 12
    stem["blocks"][0]["c_in"] = 12
    assert refused(stem, lut).startswith("the stem of hand differs from the one in the lookup "
                                         "table")
    wider = copy.deepcopy(defn)
    wider["blocks"][2]["c_out"] = 20
    wider["blocks"][3]["c_in"] = 20
    assert refused(wider, lut) == (
        "block 2 of hand is 16->20 s1 at 8x8, the lookup table layer 2 is 16->16 s1 at 8x8; "
        "pass the table of its space with --lut")


def test_an_op_the_table_did_not_time_and_another_head_are_refused(lut):
    layer = copy.deepcopy(lut.data)
    del layer["layers"][1]["candidates"]["skip"]
    other = LUT(layer)
    assert refused(definition(), other).startswith(
        "block 1 of hand uses skip, which the lookup table did not profile at that layer (has ")
    head = definition()
    head["head"]["channels"] = 32
    assert refused(head, lut).startswith(
        "the head of hand (1x1 conv to 32 channels, 10 classes) differs from the one in the "
        "lookup table (head_64x10)")


def test_a_table_from_another_cpu_warns_once(lut):
    said = []
    data = copy.deepcopy(lut.data)
    data["environment"]["cpu"] = "Some Other CPU 9000"
    warn_other_machine(LUT(data), said.append)
    assert len(said) == 1 and "Some Other CPU 9000" in said[0]
    said.clear()
    warn_other_machine(lut, said.append)  # profiled here
    assert said == []


def test_a_table_from_another_cpu_of_the_same_name_warns(lut):
    """A virtual machine can name a whole family alike ("AMD EPYC"): the identity decides."""
    said = []
    data = copy.deepcopy(lut.data)
    mine = data["environment"]["cpu_id"]
    data["environment"]["cpu_id"] = dict(mine, model="not " + mine.get("model", "this"))
    warn_other_machine(LUT(data), said.append)
    assert len(said) == 1 and "a CPU of this machine's name but not this one" in said[0]
    assert "its latencies are from another machine" in said[0]
    said.clear()
    data["environment"].pop("cpu_id")  # a table from before identities were recorded
    warn_other_machine(LUT(data), said.append)
    assert len(said) == 1 and "records no family, model or instruction sets" in said[0]
