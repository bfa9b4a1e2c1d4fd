import copy
from pathlib import Path

import pytest

import fbnas
from fbnas.arch.space import SearchSpace, bundled_spaces, load_space
from fbnas.errors import FbnasError


def test_fbnet_imagenet_matches_paper_table1():
    s = load_space("fbnet_imagenet")
    assert len(s.layers) == 22
    assert len(s.layers[0].candidates) == 9
    assert [l.c_out for l in s.layers] == [16] + [24] * 4 + [32] * 4 + [64] * 4 + [112] * 4 + [184] * 4 + [352]
    assert (s.layers[0].h, s.layers[-1].h) == (112, 7)
    assert s.final_hw == (7, 7)


def test_fbnet_cifar_never_below_4x4():
    s = load_space("fbnet_cifar")
    assert len(s.layers) == 22
    assert min(min(l.h, l.w) for l in s.layers) >= 4
    assert s.final_hw == (4, 4)
    assert s.layers[1].c_in == 16 and s.layers[1].c_out == 24


def test_hash_stable_and_shape_sensitive():
    a = load_space("tiny")
    raw = copy.deepcopy(a.raw)
    assert SearchSpace(raw).hash == a.hash
    raw["description"] = "changed text only"
    assert SearchSpace(raw).hash == a.hash
    raw["stages"][0]["channels"] = 12
    assert SearchSpace(raw).hash != a.hash


def _tiny(**changes):
    raw = copy.deepcopy(load_space("tiny").raw)
    for path, value in changes.items():
        node = raw
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if k.isdigit() else node[k]
        last = keys[-1]
        node[int(last) if last.isdigit() else last] = value
    return raw


@pytest.mark.parametrize("changes,message", [
    ({"candidates": ["k3_e6", "conv9"]}, "unknown op 'conv9'"),
    ({"stages__1__channels": -3}, r"stages\[1\].channels"),
    ({"stages__0__stride": 3}, r"stages\[0\].stride"),
    ({"input__resolution": 2}, "collapses"),
    ({"head__classes": 0}, "head.classes"),
    ({"stages__0__width": 4}, "unknown key"),
])
def test_invalid_spaces_name_the_field(changes, message):
    with pytest.raises(FbnasError, match=message):
        SearchSpace(_tiny(**changes))


def test_unknown_space_lists_bundled(tmp_path):
    with pytest.raises(FbnasError, match="fbnet_cifar"):
        load_space("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(FbnasError, match="not valid YAML"):
        load_space(bad)


def test_definition_rejects_non_candidate():
    s = load_space("tiny")
    with pytest.raises(FbnasError, match="not a candidate"):
        s.definition(["k5_e6"] * len(s.layers))


def test_bundled_spaces_ship_inside_the_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # found from any folder, not via the checkout's layout
    spaces = bundled_spaces()
    assert set(spaces) == {"fbnet_cifar", "fbnet_imagenet", "fbnet_imagenet100", "nasbench_macro",
                           "tiny"}
    assert all(Path(str(f)).parent == Path(fbnas.__file__).parent / "spaces"
               for f in spaces.values())
    assert load_space("tiny").name == "tiny"
