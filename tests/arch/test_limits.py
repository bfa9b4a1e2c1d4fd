"""Upper bounds on network sizes: oversized layers are refused with one line naming them."""

import pytest

from fbnas.arch.limits import (MAX_CHANNELS, MAX_VALUES, at_most, check_map,
                               check_weights)
from fbnas.arch.space import SearchSpace, load_space
from fbnas.errors import FbnasError


def one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


def test_at_most_passes_values_up_to_the_bound():
    assert at_most(MAX_CHANNELS, MAX_CHANNELS, "stem.channels") == MAX_CHANNELS
    with pytest.raises(FbnasError) as e:
        at_most(MAX_CHANNELS + 1, MAX_CHANNELS, "stem.channels")
    assert one_line(e) == (f"stem.channels is {MAX_CHANNELS + 1}, above fbnas's limit of "
                           f"{MAX_CHANNELS}; use a value up to {MAX_CHANNELS}")


def test_feature_maps_and_weights_above_the_value_limit_are_refused():
    check_map(64, 2048, 2048, "stem")  # exactly MAX_VALUES
    check_weights(MAX_VALUES, "head")
    with pytest.raises(FbnasError) as e:
        check_map(65, 2048, 2048, "stem")
    assert one_line(e).startswith("stem: its 65x2048x2048 feature map holds 272,629,760 values")
    assert "lower the channels or the input resolution" in str(e.value)
    with pytest.raises(FbnasError) as e:
        check_weights(MAX_VALUES + 1, "head")
    assert f"head: its weights hold {MAX_VALUES + 1:,} values" in one_line(e)


def tiny_raw() -> dict:
    import copy

    return copy.deepcopy(load_space("tiny").raw)


@pytest.mark.parametrize("path,value,says", [
    (("stem", "channels"), 1_000_000, "space field stem.channels is 1000000, above fbnas's "
                                      "limit of 16384"),
    (("input", "resolution"), 10_000, "space field input.resolution is 10000"),
    (("head", "classes"), 10**6, "space field head.classes is 1000000"),
    (("stem", "kernel"), 33, "space field stem.kernel is 33"),
])
def test_a_space_with_an_oversized_layer_is_refused_in_one_line(path, value, says):
    raw = tiny_raw()
    raw[path[0]][path[1]] = value
    with pytest.raises(FbnasError) as e:
        SearchSpace.from_dict(raw)
    assert one_line(e).startswith(says)


def test_a_space_whose_feature_map_is_too_big_names_the_layer():
    raw = tiny_raw()
    raw["input"]["resolution"] = 4096
    raw["stem"] = {"channels": 64, "kernel": 3, "stride": 1}
    with pytest.raises(FbnasError) as e:
        SearchSpace.from_dict(raw)
    assert one_line(e).startswith("space field stem: its 64x4096x4096 feature map holds")
