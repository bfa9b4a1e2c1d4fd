import pytest

from fbnas.config import Config, load_config
from fbnas.errors import FbnasError, UsageError
from tests.conftest import REPO


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


def test_a_share_of_weights_only_epochs_follows_a_shortened_search():
    # the budget recipe trains the weights alone for the first half of its epochs: 4 of 8,
    # and none of 1, so that --epochs 1 runs it rather than leaving theta untrained
    assert load_config("budget", ["loss.target_ms=1"]).warmup_epochs == 4
    assert load_config("budget", ["loss.target_ms=1", "search.epochs=1"]).warmup_epochs == 0
    assert load_config("budget", ["loss.target_ms=1", "search.epochs=5"]).warmup_epochs == 2
    assert load_config(None, ["search.warmup_epochs=3", "search.epochs=5"]).warmup_epochs == 3


@pytest.mark.parametrize("override,message", [
    ("optim.weights.lrr=0.1", "unknown config key optim.weights.lrr"),
    ("search.epochs=ten", "search.epochs must be an integer"),
    ("search.mode=medium", "search.mode must be one of soft, hard"),
    ("data.augment=3", "data.augment must be true or false"),
    ("loss.form=target", "loss.target_ms"),
    ("search.warmup_epochs=200", "warmup_epochs"),
    ("search.warmup_epochs=2.5", "a whole number of epochs, or a share of search.epochs"),
    ("search.warmup_epochs=-1", "a whole number of epochs, or a share of search.epochs"),
    ("novalue", "expected key=value"),
    ("search.theta_paths=0", "search.theta_paths must be from 1 to 64"),
    ("search.theta_steps=0", "search.theta_steps must be from 1 to 64"),
    ("search.theta_steps=2", "search.theta_steps applies to search.alternation: step"),
    ("search.final_theta_steps=65", "search.final_theta_steps must be from 0 to 64"),
    ("search.final_theta_steps=3",
     "search.final_theta_steps applies to search.alternation: step"),
    ("optim.theta.final_lr=1", r"optim.theta.final_lr must be from 0 to optim.theta.lr \(0.01\)"),
    ("optim.theta.final_lr=-0.1", "optim.theta.final_lr must be from 0"),
    ("optim.theta.final_lr=fast", "optim.theta.final_lr must be a number"),
    ("search.evaluate_every=0", "search.evaluate_every must be at least 1"),
    ("search.sandwich_every=1", "search.sandwich_every adds the biggest network to a weight "
                                "step that trains one drawn network .search.mode: hard.; set "
                                "search.mode=hard"),
    ("search.sandwich_every=-1", "search.sandwich_every must be >= 0"),
    ("search.transition_paths=1", "search.transition_paths must be 0 .* or from 2 to 64"),
    ("search.reinforce_momentum=1", r"search.reinforce_momentum must be in \[0, 1\)"),
    ("search.reinforce_baseline=leave_one_out", "needs search.theta_paths of at least 2"),
    ("search.theta_estimator=policy", "search.theta_estimator must be one of relaxed, reinforce"),
    ("search.weight_sampling=uniform", "config key search.weight_sampling was removed "
                                       r"\(weight steps on uniformly drawn .*\); drop it"),
    ("search.theta_gradient=all", "config key search.theta_gradient was removed"),
    ("loss.multiplier_pace=theta", "config key loss.multiplier_pace was removed"),
    ("loss.target_exponent=2", "config key loss.target_exponent was removed"),
    ("search.rerank=65", "search.rerank must be from 0 to 64 .the networks scored one-shot"),
    # math.exp overflowed with a traceback; a huge decay divided by a temperature of 0
    ("search.temperature.decay=-3e38", "search.temperature.decay must be >= 0"),
    ("search.temperature.decay=1e30", "brings the temperature to 0 by epoch .*use a decay"),
    ("loss.alpha=1e300", "loss.alpha must be at most 3.40282e.38 .the largest float32"),
    ("loss.target_ms=1e7", r"loss.target_ms must be at most 1e\+06 ms .1000 s per image"),
])
def test_bad_values_name_the_key(override, message):
    with pytest.raises(UsageError, match=message):
        load_config(None, [override])


def test_a_saved_run_with_a_removed_key_reads_but_resumes_only_as_this_version_runs():
    from fbnas.config import from_saved

    saved = load_config(None).to_dict()
    saved["search"].update(weight_sampling="theta", theta_gradient="all")
    saved["loss"].update(multiplier_pace="fixed", target_exponent=2.0)
    assert from_saved(saved, resuming=True).to_dict() == load_config(None).to_dict()
    saved["search"]["weight_sampling"] = "uniform"
    assert from_saved(saved).search.mode == "soft"  # sampling it reads it
    with pytest.raises(UsageError, match="started with search.weight_sampling: uniform, which "
                                         "this version of fbnas removed .*start a new run"):
        from_saved(saved, resuming=True)


def test_a_check_with_few_or_no_one_shot_passes_may_list_hundreds_of_networks():
    for rule in ("naswot", "naswot_and_theta", "naswot_and_theta_then_top1"):
        cfg = load_config(None, ["search.rerank=256", f"search.rerank_by={rule}"])
        assert (cfg.search.rerank, cfg.search.rerank_by) == (256, rule)
        with pytest.raises(UsageError, match="search.rerank must be from 0 to 1024"):
            load_config(None, ["search.rerank=1025", f"search.rerank_by={rule}"])


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


def test_bundled_configs_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny = load_config("tiny")
    assert tiny.space == "tiny" and tiny.search.epochs == 2 and tiny.warmup_epochs == 1
    assert tiny.data.dir == "data/cifar10"  # the package's default, not this checkout's
    paper = load_config("fbnet_cifar")
    assert paper.search.epochs == 90 and paper.warmup_epochs == 9
    with pytest.raises(UsageError,
                       match="unknown config .nope..*fbnet_cifar, fbnet_imagenet100, tiny"):
        load_config("nope")
    with pytest.raises(UsageError, match="config file missing.yaml does not exist"):
        load_config("missing.yaml")


def test_repository_configs_are_the_bundled_ones_on_the_shared_subset():
    for name in ("tiny", "fbnet_cifar"):
        repo = load_config(REPO / "configs" / f"{name}.yaml")
        assert repo.data.dir == "../shared/data/cifar10-subset"
        assert repo.to_dict() == load_config(name, [f"data.dir={repo.data.dir}"]).to_dict()
    assert load_config(REPO / "configs" / "demo.yaml").data.dir == "../shared/data/cifar10-subset"
    # the measured recipe: REINFORCE theta steps after every weight step; the NAS-Bench-Macro
    # config runs it for 8 epochs (4 weights-only), 16 theta steps a weight step in the last
    # while theta's rate falls to zero, and checks theta's 256 most probable networks by NASWOT
    # weighed by theta, which found better networks there than NASWOT over theta's 8;
    # fbnet_cifar, with no ground truth, keeps the one-shot and MACs ranks, one theta step
    # throughout and a constant rate
    demo = load_config(REPO / "configs" / "demo.yaml")
    macro = load_config(REPO / "configs" / "macro.yaml")
    for cfg in (demo, macro):
        assert (cfg.search.theta_estimator, cfg.search.alternation, cfg.optim.theta.lr,
                cfg.search.mode) == ("reinforce", "step", 0.05, "hard")
    assert (demo.search.rerank_by, demo.search.rerank) == ("top1_and_macs", 8)
    assert (macro.search.rerank_by, macro.search.rerank) == (
        "naswot_and_theta_early_deepest_then_one_shot", 256)
    assert (macro.space, macro.search.epochs, macro.warmup_epochs) == ("nasbench_macro", 8, 4)
    assert (demo.search.final_theta_steps, macro.search.final_theta_steps) == (0, 16)
    assert (demo.optim.theta.final_lr, macro.optim.theta.final_lr) == (None, 0)
    assert macro.optim.theta.lr == demo.optim.theta.lr
    assert (macro.loss, macro.data) == (demo.loss, demo.data)


def flat(values: dict, prefix: str = "") -> dict:
    """A config dict as {dotted key: value}."""
    out = {}
    for k, v in values.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


def changed(cfg, base) -> dict:
    """The keys where ``cfg`` differs from ``base``, with ``cfg``'s values."""
    a, b = flat(cfg.to_dict()), flat(base.to_dict())
    return {k: v for k, v in a.items() if b[k] != v}


def test_the_bundled_budget_recipe_is_the_measured_one_for_any_space():
    # what fbnas/configs/budget.yaml sets over the defaults: no space, table, data folder,
    # budget or threads, so that it runs with any space (docs/search.md, The budget recipe)
    budget = load_config("budget", ["loss.target_ms=1.5"])  # a budget it leaves to the user
    assert changed(budget, load_config()) == {"loss.target_ms": 1.5,
        "search.epochs": 8, "search.warmup_epochs": 0.5, "search.mode": "hard",
        "search.alternation": "step", "search.final_theta_steps": 16,
        "search.evaluate_every": 4, "search.theta_estimator": "reinforce", "search.rerank": 64,
        "search.rerank_by": "naswot_and_theta_deepest_then_one_shot", "loss.form": "target",
        "optim.weights.lr": 0.05, "optim.weights.warmup_epochs": 0.5, "optim.theta.lr": 0.05,
        "optim.theta.final_lr": 0.0}
    # the NAS-Bench-Macro search adds this checkout's paths, its space's two settings and a
    # depth filter that leaves the final resolution out; the demo cuts the recipe to a few
    # minutes and checks as fbnet_cifar was measured
    assert changed(load_config(REPO / "configs" / "macro.yaml"), budget) == {
        "space": "nasbench_macro", "lut": "lookup_tables/nasbench_macro_ort.json",
        "data.dir": "../shared/data/cifar10-subset", "search.shared_weights": True,
        "search.rerank": 256, "search.rerank_by": "naswot_and_theta_early_deepest_then_one_shot",
        "loss.target_ms": 1.0, "run.threads": 2}
    with pytest.raises(UsageError, match="needs a latency budget: give --target-ms"):
        load_config("budget")
    assert changed(load_config(REPO / "configs" / "demo.yaml"), budget) == {
        "data.dir": "../shared/data/cifar10-subset", "search.epochs": 3, "search.warmup_epochs": 1, "search.final_theta_steps": 0,
        "search.rerank": 8, "search.rerank_by": "top1_and_macs", "search.evaluate_every": 1,
        "loss.target_ms": 1.0, "optim.theta.final_lr": None, "run.threads": 2}


def test_base_is_merged_beneath_and_relative_to_the_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.yaml").write_text(
        "base: tiny\nsearch: {epochs: 4}\ndata: {dir: /data/c10, batch_size: 16}\n")
    (tmp_path / "top.yaml").write_text("base: sub/mine.yaml\nsearch: {mode: hard}\n")
    cfg = load_config(tmp_path / "top.yaml", ["data.batch_size=8"])
    assert (cfg.space, cfg.lut) == ("tiny", "lookup_tables/tiny_ort.json")  # from tiny
    assert (cfg.search.epochs, cfg.warmup_epochs, cfg.search.mode) == (4, 1, "hard")
    assert cfg.data.dir == "/data/c10" and cfg.data.batch_size == 8
    assert "base" not in cfg.to_dict()


@pytest.mark.parametrize("files,message", [
    ({"a.yaml": "base: a.yaml\n"}, "leads back to"),
    ({"a.yaml": "base: b.yaml\n", "b.yaml": "base: ../x/a.yaml\n"}, "leads back to"),
    ({"a.yaml": "base: [tiny]\n"}, "config key base in .*a.yaml must be a bundled config name"),
    ({"a.yaml": "base: nothere.yaml\n"}, "x/nothere.yaml does not exist"),
    ({"a.yaml": "base: huge\n"}, "unknown config 'huge'"),
])
def test_bad_base_is_one_line_error(tmp_path, files, message):
    (tmp_path / "x").mkdir()
    for name, text in files.items():
        (tmp_path / "x" / name).write_text(text)
    with pytest.raises(UsageError, match=message):
        load_config(tmp_path / "x" / "a.yaml")


def test_options_are_typed_values_never_parsed_as_yaml(tmp_path):
    # a folder named 2024 or on is a folder name, where YAML would read a number or true
    cfg = load_config(None, [], options={"data.dir": "2024", "space": "on", "run.seed": 3,
                                         "retrain.arch": tmp_path / "a.json",
                                         "retrain.name": "0x10", "loss.target_ms": 1.5})
    assert cfg.data.dir == "2024" and cfg.space == "on" and cfg.run.seed == 3
    assert cfg.retrain.arch == str(tmp_path / "a.json") and cfg.retrain.name == "0x10"
    assert cfg.loss.target_ms == 1.5


def test_options_sit_between_the_file_and_set():
    cfg = load_config("tiny", ["data.dir=from-set"], options={"search.epochs": 7})
    assert cfg.data.dir == "from-set" and cfg.search.epochs == 7
    assert load_config("tiny").search.epochs != 7


@pytest.mark.parametrize("overrides, options, message", [
    (["loss.target_ms=3"], {"loss.form": "target", "loss.target_ms": 1.5},
     r"--set 'loss.target_ms=3' contradicts --target-ms, which sets loss.target_ms to 1.5"),
    (["loss.form=paper"], {"loss.form": "target", "loss.target_ms": 1.5},
     "contradicts --target-ms, which sets loss.form to 'target'"),
    (["loss={target_ms: 3}"], {"loss.target_ms": 1.5}, "contradicts --target-ms"),
    (["data.dir=b"], {"data.dir": "a"}, "contradicts --data-dir"),
    (["search.epochs=4"], {"search.epochs": 3}, "contradicts --epochs"),
])
def test_a_set_that_contradicts_a_named_option_is_refused(overrides, options, message):
    """--set once silently overrode the option, so fbnas pick --target-ms 1.5 --set
    loss.target_ms=3 searched under 3 ms and named the result after 1.5."""
    with pytest.raises(UsageError, match=message):
        load_config(None, overrides, options=options)
    same = [o.replace("3", "1.5").replace("paper", "target").replace("=b", "=a") for o in
            overrides]
    if "epochs" not in overrides[0]:  # the same value twice is no contradiction
        load_config(None, same, options=options)


@pytest.mark.parametrize("options, message", [
    ({"run.seed": "3"}, "run.seed must be an integer"),
    ({"data.dir": 2024}, "data.dir must be a string"),
    ({"data.nope": 1}, "unknown config key data.nope"),
    ({"space": "tiny", "space.name": "x"}, "option for space.name: space is not a section"),
])
def test_options_are_still_validated(options, message):
    with pytest.raises(UsageError, match=message):
        load_config(None, [], options=options)


def test_every_key_says_what_it_does_in_one_line():
    import dataclasses

    def keys(cls, prefix=""):
        for f in dataclasses.fields(cls):
            yield prefix + f.name, f
            if dataclasses.is_dataclass(f.default_factory):
                yield from keys(f.default_factory, f"{prefix}{f.name}.")

    for name, f in keys(Config):
        doc = f.metadata.get("doc", "")
        assert doc.strip() and "\n" not in doc and len(doc) <= 200, name


def test_the_config_reference_is_what_the_declarations_render():
    from fbnas.config import reference

    on_disk = (REPO / "docs" / "config.md").read_text()
    assert on_disk == reference(), "docs/config.md is stale: run make docs"
    for key in ("search.rerank_by", "optim.theta.final_lr", "run.keep_freed_memory"):
        assert f"| `{key}` |" in on_disk


def test_messages_name_a_deepest_rule_by_what_it_sums_and_its_filter():
    # a search's log and fbnas pick say "best NASWOT, theta and one-shot among the fewest
    # skip of 256 checked": depth filters the shortlist, it is not a summed figure
    from fbnas.check_rules import rule_label
    assert rule_label("naswot_and_theta_deepest_then_one_shot") == \
        "NASWOT, theta and one-shot among the fewest skip"
    assert rule_label("naswot_and_theta_deepest") == "NASWOT and theta among the fewest skip"
    assert rule_label("naswot_and_theta_early_deepest_then_one_shot") == \
        "NASWOT, theta and one-shot among the fewest skip before the final resolution"
    assert rule_label("naswot_and_theta_then_one_shot") == "NASWOT, theta and one-shot"
