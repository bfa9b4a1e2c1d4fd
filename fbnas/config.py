"""Typed run configuration: defaults, YAML files, ``--set a.b=value`` overrides.

Every key is declared here with its type; unknown keys and ill-typed values are refused with
the key's dotted name, so a typo never silently falls back to a default.

A config file is a path or the name of a bundled config (``fbnas/configs/NAME.yaml``), and
may start from another one with ``base: NAME_OR_PATH``: the bundled configs hold the search
settings once, and a checkout's or a user's own config adds only what is theirs (typically
the data folder) on top.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from fbnas.check_rules import FIGURES_DOC, ONE_SHOT_RULES, RERANK_RULES, how
from fbnas.errors import FbnasError, UsageError, brief
from fbnas.io import load_yaml, parse_yaml
from fbnas.resources import bundled, names_a_file

# A relative default: the folder a user would download CIFAR-10 into (--download does).
DEFAULT_DATA_DIR = "data/cifar10"

#: the largest finite float32: rates and decays become float32 factors in the optimizers, and
#: no number a config holds means anything beyond it
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_WHY = "the largest float32, the precision fbnas computes in"
#: the largest latency budget, in ms: 1000 s per image, a million times a typical table's
#: networks (about 1 ms) and far beyond any a table times; a larger budget bounds nothing,
#: and its microseconds overflow the arithmetic that compares networks with it
MAX_BUDGET_MS = 1e6
BUDGET_WHY = "1000 s per image, beyond any network a lookup table times"


def number_problem(value: Any, high: float = FLOAT32_MAX, why: str = FLOAT32_WHY,
                   unit: str = "") -> str | None:
    """What is wrong with ``value`` as a number fbnas computes with: not a number, not
    finite, or larger in size than ``high`` (``why`` says why the bound, ``unit`` what the
    number counts: "ms", "s"); None when it is fine. The one bound check of the numbers a
    user gives: config keys (:func:`_coerce`), the latency budget (:class:`Budget`) and the
    command line's float options use it, so 1e308 is refused with one line wherever it is
    typed instead of overflowing somewhere in the arithmetic."""
    of = f" of {unit}" if unit else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number{of}, got {brief(value)}"
    got = f"{value:g}" if isinstance(value, float) else brief(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number{of}, got {got}"
    if abs(value) > high:
        return f"must be at most {high:g}{' ' + unit if unit else ''} ({why}), got {got}"
    return None


def _key(default: Any, doc: str, **kwargs: Any) -> Any:
    """A config key with its default and ``doc``, its one line in docs/config.md (what it
    does); ``default_factory`` may stand for ``default``."""
    if "default_factory" in kwargs:
        return field(default_factory=kwargs.pop("default_factory"), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc, **kwargs})


def _choices(*values: str, default: str, doc: str,
             renamed: dict[str, tuple[str, str]] | None = None) -> Any:
    """A string key taking one of ``values``; ``renamed`` maps a value earlier versions took
    to (the value that replaced it, why), both said in the error that refuses it."""
    return _key(default, doc, choices=values, renamed=renamed or {})


def _section(cls: type, doc: str) -> Any:
    """A section of keys (a dataclass), described by ``doc`` in docs/config.md."""
    return _key(None, doc, default_factory=cls)


@dataclass
class DataConfig:
    dir: str = _key(DEFAULT_DATA_DIR, "the data folder: CIFAR-10's cifar-10-batches-py/ (or "
                                      "the folder holding it), or an image folder (--data-dir)")
    kind: str = _choices("cifar10", "folder", default="cifar10",
                         doc="what data.dir holds: CIFAR-10's python batches or an image "
                             "folder of train/CLASS/ and val/CLASS/")
    resolution: int = _key(0, "side of an image folder's images after resizing; 0: the "
                              "space's input resolution")
    # folders: decode all images into memory once, or per batch in worker processes
    loader: str = _choices("auto", "memory", "stream", default="auto",
                           doc="an image folder decoded into memory once, or per batch by "
                               "worker processes; auto: memory while it fits data.memory_mb")
    memory_mb: int = _key(512, "the most memory (MiB) a folder's decoded images may take for "
                               "data.loader auto to keep them in memory")
    workers: int = _key(-1, "decoding processes of a streamed folder per training process; "
                            "-1: from the usable cores")
    skip_bad: bool = _key(False, "skip (and count) unreadable images instead of stopping")
    classes: str = _key("", "file listing the class folders to use, one a line (fbnas "
                            "classes writes one); empty: all")
    val_fraction: float = _key(0.1, "share of the training images held out for per-epoch "
                                    "evaluation and the search's final check")
    theta_fraction: float = _key(0.2, "share of the rest that trains theta; the others train "
                                      "the weights (the paper's 80/20)")
    batch_size: int = _key(64, "training batch per process: N processes train on N x "
                               "batch_size images a step")
    eval_batch_size: int = _key(256, "batch of evaluation passes (no gradients, so larger)")
    augment: bool = _key(True, "random crop with padding and horizontal flip of training "
                               "images")
    limit: int = _key(0, "use only the first N training images; 0: all")
    download: bool = _key(False, "download CIFAR-10 into data.dir when it is missing "
                                 "(--download)")


@dataclass
class TemperatureConfig:
    initial: float = _key(5.0, "Gumbel-softmax temperature tau at the first epoch")
    decay: float = _key(0.045, "tau(epoch) = initial * exp(-decay * epoch)")


@dataclass
class SearchConfig:
    epochs: int = _key(90, "search epochs (--epochs)")
    warmup_epochs: Optional[float] = _key(None, "first epochs that train the weights only: a "
                                                "whole number, or a share of search.epochs "
                                                "below 1 (0.5: the first half, rounded down); "
                                                "null: 10% of search.epochs")
    mode: str = _choices("soft", "hard", default="soft",
                         doc="soft: every candidate of a layer runs, mixed by Gumbel-softmax "
                             "weights; hard: one drawn candidate runs (--mode)")
    per_sample: bool = _key(False, "one Gumbel draw per image instead of one per batch")
    alternation: str = _choices("epoch", "step", default="epoch",
                                doc="theta steps after all of an epoch's weight steps, or "
                                    "after every weight step")
    accumulate: int = _key(1, "micro-batches whose gradients add up to one optimizer step")
    # a REINFORCE theta step costs one forward pass of one network, so several fit where
    # one weight step does: each draws another network, and theta's gradient averages more
    theta_steps: int = _key(1, "theta steps after each weight step (search.alternation: "
                               "step)")
    # theta decides on the grown weights, where more steps throughout decide on young ones
    final_theta_steps: int = _key(0, "theta steps after each weight step of the last epoch "
                                     "only; 0: search.theta_steps")
    # "flops" (2 per multiply-add) was the name before counts were MACs; only a saved config
    # still says it (see from_saved)
    cost: str = _choices("latency", "macs", "params", default="latency",
                         renamed={"flops": ("macs", "compute is counted in multiply-adds, "
                                                    "as papers report it")},
                         doc="what LAT is in the paper loss: table latency (us), "
                             "multiply-adds or parameters")
    eval_mode: str = _choices("argmax", "softmax", default="argmax",
                              doc="how the supernet is evaluated: each layer's most probable "
                                  "candidate, or all mixed by softmax(theta); never Gumbel "
                                  "noise")
    temperature: TemperatureConfig = _section(TemperatureConfig, "The Gumbel-softmax "
                                                                 "temperature's schedule.")
    supernet: str = _choices("loop", "fast", default="fast",
                             doc="loop: every candidate in turn (the reference); fast: fused "
                                 "mixed ops in channels_last, the same math, quicker soft "
                                 "steps")
    # the candidates of a layer are then interchangeable at initialisation
    zero_init_residual: bool = _key(True, "every residual candidate starts as the identity "
                                          "(its last BN scale zero)")
    # instead of switching between their unrelated representations at every step
    soft_transitions: bool = _key(True, "hard mode: mix all candidates of transition layers "
                                        "(stride 2 or a new width)")
    transition_paths: int = _key(0, "hard mode: mix only this many candidates of a "
                                    "transition layer, drawn from softmax(theta) at each step; "
                                    "0: all")
    # BigNAS's sandwich rule without its smallest network: a drawn path trains the big
    # candidates' weights only when it draws them, so one-shot scores underrate them
    sandwich_every: int = _key(0, "hard mode: every Nth weight step also trains the biggest "
                                  "network (each layer's costliest candidate), its loss added "
                                  "to the drawn network's; 0: never")
    shared_weights: bool = _key(False, "the kK_eE[_gG] candidates of a layer slice one set "
                                       "of weights, so every step trains them all")
    recalibrate_images: int = _key(1024, "training images that re-estimate the evaluated "
                                         "network's BN statistics before each evaluation; 0: "
                                         "the running statistics")
    # nothing the search decides reads those scores, and each costs two BN re-estimations
    # and two val passes
    evaluate_every: int = _key(1, "score the supernet and the found network on the val "
                                  "split after every Nth epoch and the last")
    theta_relaxation: str = _choices("gumbel", "softmax", default="softmax",
                                     doc="how a relaxed theta step weights a layer's "
                                         "candidates: softmax(theta) without noise, or the "
                                         "Gumbel sample of search.mode (the paper)")
    theta_estimator: str = _choices("relaxed", "reinforce", default="relaxed",
                                    doc="relaxed: differentiate through the candidates' "
                                        "mixing weights; reinforce: sampled networks' rewards "
                                        "against a baseline (TuNAS)")
    theta_paths: int = _key(1, "networks a REINFORCE theta step draws and runs")
    # leave_one_out: how hard the batch is cancels out
    reinforce_baseline: str = _choices("moving_average", "leave_one_out",
                                       default="moving_average",
                                       doc="what a REINFORCE reward is compared with: a moving "
                                           "average of past rewards, or the step's other "
                                           "networks' mean (search.theta_paths >= 2)")
    reinforce_momentum: float = _key(0.9, "momentum of the REINFORCE rewards' moving "
                                          "average")
    rerank: int = _key(8, "under a budget, after the last epoch: theta's most probable "
                          "networks within the budget's window the check compares; 0 or 1: "
                          "the most probable one")
    rerank_by: str = _choices(*RERANK_RULES, default="top1",
                              doc="how the check chooses among them (the rules: below)")
    # a layer theta settled early is then checked too (oneshot_check.py)
    rerank_alternatives: bool = _key(False, "also check, per layer and candidate, the most "
                                            "probable network in the window using it there")


@dataclass
class LossConfig:
    # both forms train theta only; the weights train on the cross-entropy alone
    form: str = _choices("paper", "target", default="paper",
                         doc="paper: CE * alpha * (log LAT)^beta; target: CE plus a penalty "
                             "on missing loss.target_ms (--target-ms sets it)")
    alpha: float = _key(0.2, "scale of the paper loss (theta's Adam ignores it)")
    beta: float = _key(0.6, "exponent of log LAT in the paper loss: higher, faster networks")
    target_ms: Optional[float] = _key(None, "the latency budget in ms of the target form "
                                            "(--target-ms)",
                                      bound=(MAX_BUDGET_MS, BUDGET_WHY, "ms"))
    # how the default was chosen: docs/search.md, Loss
    target_weight: float = _key(1.0, "weight of the target penalty |LAT / target - 1| "
                                     "against the cross-entropy")
    target_on: str = _choices("argmax", "sample", default="argmax",
                              doc="whose latency the penalty compares with the budget: "
                                  "theta's argmax network or the step's Gumbel sample")
    # multiplier: the push settles where it balances the cross-entropy's instead of
    # swinging by target_weight each way
    target_penalty: str = _choices("absolute", "multiplier", default="absolute",
                                   doc="absolute: target_weight * |LAT / T - 1| (TuNAS); "
                                       "multiplier: lam * (LAT / T - 1), lam raised by dual "
                                       "ascent")
    # see fbnas/search/window.py, ops_in_window
    target_floor: float = _key(0.9, "the found network spends at least this share of the "
                                    "budget where any network can; 0: anything under it")
    multiplier_lr: float = _key(0.1, "step of the multiplier after each theta step "
                                     "(loss.target_penalty: multiplier)")


@dataclass
class WeightOptimConfig:
    lr: float = _key(0.1, "SGD learning rate of the weights, the peak of a cosine schedule")
    momentum: float = _key(0.9, "SGD momentum")
    weight_decay: float = _key(1e-4, "SGD weight decay")
    nesterov: bool = _key(False, "Nesterov momentum")
    warmup_epochs: float = _key(0.0, "linear learning-rate warm-up before the cosine "
                                     "schedule, in epochs")
    min_lr: float = _key(0.0, "learning rate at the end of the cosine schedule")


@dataclass
class ThetaOptimConfig:
    lr: float = _key(0.01, "Adam learning rate of theta")
    weight_decay: float = _key(5e-4, "Adam weight decay of theta")
    beta1: float = _key(0.9, "Adam's first-moment decay")
    beta2: float = _key(0.999, "Adam's second-moment decay")
    # so that theta settles instead of flipping near-ties at the end
    final_lr: Optional[float] = _key(None, "over the last epoch theta's rate falls along a "
                                           "cosine from optim.theta.lr to this; null: "
                                           "constant")


@dataclass
class OptimConfig:
    weights: WeightOptimConfig = _section(WeightOptimConfig, "SGD of the weights, in the "
                                                              "search and the retrain.")
    theta: ThetaOptimConfig = _section(ThetaOptimConfig, "Adam of theta, the architecture "
                                                          "parameters.")


@dataclass
class RetrainConfig:
    arch: Optional[str] = _key(None, "architecture file written by fbnas sample")
    name: Optional[str] = _key(None, "which architecture in it (optional if it holds one)")
    epochs: int = _key(100, "retrain epochs (fbnas retrain --epochs)")
    warmup_epochs: float = _key(1.0, "linear learning-rate warm-up in epochs (the larger of "
                                     "this and optim.weights')")
    label_smoothing: float = _key(0.1, "label smoothing of the retrain's cross-entropy")
    dropout: float = _key(0.0, "dropout before the classifier")
    decay_norm_and_bias: bool = _key(False, "weight decay on BN parameters and biases too")
    zero_init_residual: bool = _key(True, "residual blocks start as the identity (last BN "
                                          "scale zero), as the supernet's do")
    clip_grad_norm: float = _key(2.0, "the total gradient norm per step is cut to this; 0: "
                                      "off")
    # channels_last is where CPU depthwise and 1x1 convs run fastest (the same math, other
    # rounding); contiguous is how runs saved before this key trained
    memory_format: str = _choices("channels_last", "contiguous", default="channels_last",
                                  doc="tensor layout of retrain steps: NHWC or NCHW")
    # the same math, other rounding, fewer memory passes (docs/retrain.md)
    fold_bn: bool = _key(False, "fp32 CPU steps compute a block's expansion BN statistics "
                                "from its input (fbnas/arch/folded_bn.py)")


@dataclass
class RunConfig:
    seed: int = _key(0, "seed of every random draw: splits, weights, theta, data order "
                        "(--seed)")
    device: str = _choices("auto", "cpu", "cuda", default="auto",
                           doc="where the run trains; auto: cuda where there is one (--device)")
    threads: Optional[int] = _key(None, "torch intra-op threads per process; null: torch's "
                                        "default (--threads)")
    log_every: int = _key(20, "steps between TensorBoard scalar points")
    progress: bool = _key(True, "progress bars on a terminal")
    # bf16_products is faster where the CPU has bf16 units, slower where it has none; bf16
    # is for GPUs (docs/retrain.md, Speed)
    precision: str = _choices("fp32", "bf16_products", "bf16", default="fp32",
                              doc="bf16_products: CPU training steps' 1x1 convs as bfloat16 "
                                  "matrix products; bf16: training forwards under bfloat16 "
                                  "autocast")
    # steps stop paying page faults for their large tensors, the process keeps its peak
    # memory; results are unchanged (fbnas.machine.keep_freed_memory)
    keep_freed_memory: bool = _key(True, "keep freed memory in the process heap for the next "
                                         "step instead of returning it to the kernel (off "
                                         "while a run streams its images)")


@dataclass
class Config:
    space: str = _key("fbnet_cifar", "search space: a bundled name or a YAML file (--space)")
    lut: str = _key("lookup_tables/fbnet_cifar_ort.json", "lookup table JSON made by fbnas "
                                                          "profile for the space (--lut)")
    data: DataConfig = _section(DataConfig, "What a run reads: the data set, its splits and "
                                            "batches ([Data](data.md)).")
    search: SearchConfig = _section(SearchConfig, "The supernet, theta's steps and the check "
                                                  "after the last epoch "
                                                  "([Searching](search.md)).")
    loss: LossConfig = _section(LossConfig, "The search loss that trains theta, and its "
                                            "latency budget ([Loss](search.md#loss)).")
    optim: OptimConfig = _section(OptimConfig, "The optimizers of the weights and of theta.")
    retrain: RetrainConfig = _section(RetrainConfig, "Retraining a found network "
                                                     "([Retraining](retrain.md)).")
    run: RunConfig = _section(RunConfig, "Seed, device, threads, precision and logging.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def warmup_epochs(self) -> int:
        """The weights-only epochs as a count. A share keeps a recipe's proportions when a
        user shortens it with --epochs (the budget recipe's half of 8 is 4, of 1 is 0)."""
        w, epochs = self.search.warmup_epochs, self.search.epochs
        if w is None:
            return int(round(0.1 * epochs))
        return int(w * epochs) if 0 < w < 1 else int(w)


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, key: str, f: dataclasses.Field) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key, f)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise UsageError(f"config key {key} must be a mapping, got {brief(value)}")
        return _build(tp, value, key + ".")
    if tp is bool:
        if not isinstance(value, bool):
            raise UsageError(f"config key {key} must be true or false, got {brief(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"config key {key} must be an integer, got {brief(value)}")
        if abs(value) >= 2 ** 63:  # torch and numpy take 64-bit integers
            raise UsageError(f"config key {key} is too large (about "
                             f"{int(value.bit_length() * 0.30103)} digits); "
                             "integers must fit in 64 bits")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        problem = number_problem(value, *f.metadata.get("bound", ()))
        if problem:
            raise UsageError(f"config key {key} {problem}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise UsageError(f"config key {key} must be a string, got {brief(value)}")
        choices = f.metadata.get("choices")
        if value in f.metadata.get("renamed", {}):
            new, why = f.metadata["renamed"][value]
            raise UsageError(f"config key {key}: {brief(value)} is now {brief(new)} ({why}); use "
                             f"{key}: {new}")
        if choices and value not in choices:
            raise UsageError(f"config key {key} must be one of {', '.join(choices)}, got "
                             f"{brief(value)}")
        return value
    raise TypeError(f"unsupported config type {tp} for {key}")


def _build(cls, values: dict, prefix: str = ""):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    for key in unknown:
        removed = _REMOVED.get((prefix.rstrip("."), key))
        if removed:
            raise UsageError(f"config key {prefix}{key} was removed ({removed[1]}); drop it")
    if unknown:
        raise UsageError(f"unknown config key {prefix}{unknown[0]}; known keys under "
                         f"{prefix or 'the top level'}: {', '.join(fields)}")
    hints = _hints(cls)
    obj = cls()
    for name, value in values.items():
        setattr(obj, name, _coerce(value, hints[name], prefix + name, fields[name]))
    return obj


def _merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=value`` -> (["a", "b"], value parsed as a YAML scalar)."""
    if "=" not in item:
        raise UsageError(f"--set {brief(item)}: expected key=value, e.g. --set "
                         f"optim.weights.lr=0.05")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise UsageError(f"--set {brief(item)}: the key is empty")
    try:
        value = parse_yaml(raw, f"--set {key}") if raw.strip() else ""
    except FbnasError as e:
        if "YAML" not in str(e):  # a number too long, nesting too deep: not a plain string
            raise UsageError(str(e)) from None
        value = raw
    return key.split("."), value


@dataclass(frozen=True)
class Budget:
    """A search's latency budget: networks predicted at most ``us`` microseconds, spending at
    least ``floor`` of it where any network of the space does.

    The budget is written in milliseconds (``loss.target_ms``, ``--target-ms``) and consumed
    in microseconds, the unit of lookup tables; this is the one place the two meet and the one
    place a budget is checked. A search builds it from its config with :meth:`of`; sampling
    builds it from the run's saved config, after :func:`from_saved` migrated it, or from
    ``--target-ms``. ``ms`` keeps the number as written, for what is printed and recorded;
    everything that compares or divides by the budget reads ``us``.
    """

    ms: float
    floor: float = 0.0
    us: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ms = self.ms
        if ms is None:
            raise UsageError("a budget search (loss.form: target) needs a latency budget: give "
                             "--target-ms MS (or set loss.target_ms)")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) \
                or ms <= 0:
            raise UsageError("the latency budget (loss.target_ms of loss.form=target, or "
                             f"--target-ms) must be a positive number of ms, got {brief(ms)} (e.g. "
                             "--set loss.target_ms=5)")
        problem = number_problem(ms, MAX_BUDGET_MS, BUDGET_WHY, "ms")
        if problem:
            raise UsageError(f"the latency budget (loss.target_ms, --target-ms) {problem}")
        check_floor(self.floor)
        object.__setattr__(self, "us", ms * 1000.0)

    @classmethod
    def of(cls, cfg: Config) -> Budget | None:
        """The budget a search with ``cfg`` runs under: None unless ``loss.form`` is target."""
        if cfg.loss.form != "target":
            return None
        return cls(cfg.loss.target_ms, cfg.loss.target_floor)


def check_floor(floor: float) -> None:
    """Refuse a floor outside [0, 1): the share of a budget a network must spend."""
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor < 1:
        raise UsageError("config key loss.target_floor must be in [0, 1) (the share of the "
                         f"budget the network must spend), got "
                         f"{format(floor, 'g') if isinstance(floor, (int, float)) else repr(floor)}")


#: the most decoding processes data.workers may ask for per training process: each holds a
#: copy of the loader's state, and beyond the cores they only compete for them
MAX_WORKERS = 64


#: the lowest Gumbel-softmax temperature a schedule may reach: theta and the noise are
#: divided by it, and below this a float32 quotient of a large theta overflows
MIN_TEMPERATURE = 1e-4


def _check_final_temperature(s: SearchConfig) -> None:
    """Refuse a temperature schedule that rises (a negative decay overflowed math.exp with a
    traceback) or falls below MIN_TEMPERATURE by the last epoch (a decay of 1e30 made it 0)."""
    t = s.temperature
    if t.decay < 0:
        raise UsageError(f"config key search.temperature.decay must be >= 0 (the temperature "
                         f"falls from search.temperature.initial), got {t.decay:g}")
    last = t.initial * math.exp(-t.decay * max(s.epochs - 1, 0))
    if last < MIN_TEMPERATURE:
        fits = math.log(t.initial / MIN_TEMPERATURE) / max(s.epochs - 1, 1)
        raise UsageError(f"config key search.temperature.decay {t.decay:g} brings the "
                         f"temperature to {last:.3g} by epoch {s.epochs}, below the "
                         f"{MIN_TEMPERATURE:g} the Gumbel-softmax divides by safely; use a "
                         f"decay of at most {fits:.4g}")


def _need(ok: bool, msg: str) -> None:
    """Refuse a config whose check ``ok`` failed, with ``msg`` saying which key and how to
    fix it."""
    if not ok:
        raise UsageError(msg)


def validate(cfg: Config) -> Config:
    """Cross-field checks that a type cannot express, section by section."""
    _check_data(cfg.data)
    _check_search(cfg)
    _check_loss(cfg)
    _check_optim(cfg.optim)
    _check_run_and_retrain(cfg)
    return cfg


def _check_data(d: DataConfig) -> None:
    """``data``: fractions within their ranges, sizes and counts within bounds, classes only
    of an image folder."""
    _need(0 <= d.val_fraction < 1, "config key data.val_fraction must be in [0, 1)")
    _need(0 < d.theta_fraction < 1, "config key data.theta_fraction must be in (0, 1)")
    _need(d.batch_size >= 1 and d.eval_batch_size >= 1, "config key data.batch_size must be >= 1")
    _need(d.limit >= 0, "config key data.limit must be >= 0")
    _need(d.resolution >= 0, "config key data.resolution must be >= 0 (0: the network's)")
    _need(-1 <= d.workers <= MAX_WORKERS,
          f"config key data.workers must be from 0 to {MAX_WORKERS} (decoding processes per "
          f"training process), or -1 to choose from the cores; got {d.workers}")
    _need(not d.classes or d.kind == "folder",
          f"config key data.classes ({d.classes}) selects class folders of an image folder, "
          f"but data.kind is {d.kind}; drop data.classes or set data.kind: folder")
    _need(d.memory_mb >= 0, "config key data.memory_mb must be >= 0")


def _check_search(cfg: Config) -> None:
    """``search``: theta's steps and paths, epochs against the weights-only warm-up, the final
    check's size for its rule, the temperature; ``cfg`` whole because the warm-up's default
    comes from the epochs."""
    s = cfg.search
    _need(1 <= s.theta_steps <= 64, "config key search.theta_steps must be from 1 to 64 (theta "
          "steps after each weight step)")
    _need(s.theta_steps == 1 or s.alternation == "step",
          "config key search.theta_steps applies to search.alternation: step; set "
          "search.alternation=step or search.theta_steps=1")
    _need(0 <= s.final_theta_steps <= 64, "config key search.final_theta_steps must be from 0 "
          "to 64 (theta steps after each weight step of the last epoch; 0: search.theta_steps)")
    _need(s.final_theta_steps <= 1 or s.alternation == "step",
          "config key search.final_theta_steps applies to search.alternation: step; set "
          "search.alternation=step or search.final_theta_steps=0")
    _need(s.recalibrate_images >= 0, "config key search.recalibrate_images must be >= 0")
    _need(s.evaluate_every >= 1, "config key search.evaluate_every must be at least 1 (1 "
                                 "scores every epoch; the last epoch is always scored)")
    _need(s.epochs >= 1, "config key search.epochs must be at least 1")
    w = s.warmup_epochs
    _need(w is None or (w >= 0 and (w < 1 or w == int(w))),
          "config key search.warmup_epochs must be a whole number of epochs, or a share of "
          "search.epochs from 0 to 1 (0.5: the first half)")
    # the paper's share (what an unset search.warmup_epochs means) is always below the epochs
    _need(cfg.warmup_epochs <= s.epochs,
          f"search.epochs ({s.epochs}, --epochs) is below search.warmup_epochs "
          f"({cfg.warmup_epochs}), the weights-only epochs, so theta would never train: add "
          f"--set search.warmup_epochs={int(round(0.1 * s.epochs))} (10% of the epochs) or "
          f"train at least {cfg.warmup_epochs + 1} epochs")
    _need(s.accumulate >= 1, "config key search.accumulate must be at least 1")
    _need(s.sandwich_every >= 0, "config key search.sandwich_every must be >= 0 (0: never)")
    _need(not s.sandwich_every or s.mode == "hard",
          "config key search.sandwich_every adds the biggest network to a weight step that "
          "trains one drawn network (search.mode: hard); set search.mode=hard or "
          "search.sandwich_every=0")
    _need(1 <= s.theta_paths <= 64, "config key search.theta_paths must be from 1 to 64 (the "
                                    "networks a REINFORCE theta step runs)")
    _need(s.reinforce_baseline != "leave_one_out" or s.theta_paths >= 2,
          "config key search.reinforce_baseline=leave_one_out compares each network with the "
          "step's others, so it needs search.theta_paths of at least 2: add --set "
          "search.theta_paths=2")
    _need(s.transition_paths == 0 or 2 <= s.transition_paths <= 64,
          "config key search.transition_paths must be 0 (mix every candidate of a transition "
          f"layer) or from 2 to 64, got {s.transition_paths}; one path there is "
          "search.soft_transitions=false")
    if s.rerank_by in ONE_SHOT_RULES:  # a one-shot pass over the val split per network
        _need(0 <= s.rerank <= 64, "config key search.rerank must be from 0 to 64 (the "
                                   f"networks scored one-shot after the search), got {s.rerank}")
    else:  # a NASWOT score costs one batch's forward pass, no pass over the val split
        _need(0 <= s.rerank <= 1024, "config key search.rerank must be from 0 to 1024 (the "
                                     f"networks checked after the search), got {s.rerank}")
    _need(0 <= s.reinforce_momentum < 1, "config key search.reinforce_momentum must be in "
                                         f"[0, 1), got {s.reinforce_momentum:g}")
    _need(s.temperature.initial > 0, "config key search.temperature.initial must be positive")
    _check_final_temperature(s)


def _check_loss(cfg: Config) -> None:
    """``loss``: positive weights, the budget (built once to check it) only with latency as
    the cost."""
    s, lo = cfg.search, cfg.loss
    _need(lo.alpha > 0, "config key loss.alpha must be positive")
    _need(lo.beta > 0, "config key loss.beta must be positive")
    check_floor(lo.target_floor)  # sampling a search under --target-ms uses it too
    Budget.of(cfg)
    if lo.form == "target":
        _need(s.cost == "latency", "loss.form=target needs search.cost=latency")
    _need(lo.target_weight > 0, "config key loss.target_weight must be positive")
    _need(0 < lo.multiplier_lr <= 1e6, "config key loss.multiplier_lr must be positive (and at "
                                       "most 1e6)")


def _check_optim(optim: OptimConfig) -> None:
    """``optim``: rates, momenta and decays that the optimizers take as float32 factors, and
    theta's final rate no higher than its rate."""
    ow, ot = optim.weights, optim.theta
    for key, lr in (("optim.weights.lr", ow.lr), ("optim.theta.lr", ot.lr),
                    ("optim.weights.min_lr", ow.min_lr)):
        # the optimizers apply the rate as a float32 factor
        _need(0 <= lr <= FLOAT32_MAX and (lr > 0 or key.endswith("min_lr")),
              f"config key {key} must be positive and at most {FLOAT32_MAX:.3g}, got {lr:g}")
    _need(0 <= ow.momentum < 1, f"config key optim.weights.momentum must be in [0, 1), got "
                                f"{ow.momentum:g}")
    _need(not ow.nesterov or ow.momentum > 0,
          "optim.weights.nesterov needs a momentum above 0: set optim.weights.momentum (e.g. "
          "0.9) or optim.weights.nesterov=false")
    _need(ow.warmup_epochs >= 0, "config key optim.weights.warmup_epochs must be >= 0")
    _need(ot.final_lr is None or 0 <= ot.final_lr <= ot.lr,
          f"config key optim.theta.final_lr must be from 0 to optim.theta.lr ({ot.lr:g}), got "
          f"{ot.final_lr}; leave it unset (null) to keep theta's rate constant")
    for key, decay in (("optim.weights.weight_decay", ow.weight_decay),
                       ("optim.theta.weight_decay", ot.weight_decay)):
        _need(0 <= decay <= FLOAT32_MAX, f"config key {key} must be >= 0, got {decay:g}")
    for key, beta in (("optim.theta.beta1", ot.beta1), ("optim.theta.beta2", ot.beta2)):
        _need(0 <= beta < 1, f"config key {key} must be in [0, 1) (Adam's decay rate), got "
                             f"{beta:g}")


def _check_run_and_retrain(cfg: Config) -> None:
    """``run`` and ``retrain``: threads, logging, epochs and the retrain's regularisation."""
    _need(cfg.run.threads is None or cfg.run.threads >= 1, "config key run.threads must be >= 1")
    _need(cfg.run.log_every >= 1, "config key run.log_every must be >= 1")
    r = cfg.retrain
    _need(r.epochs >= 1, "config key retrain.epochs must be at least 1")
    _need(r.warmup_epochs >= 0, "config key retrain.warmup_epochs must be >= 0")
    _need(0 <= r.label_smoothing < 1, "config key retrain.label_smoothing must be in [0, 1)")
    _need(0 <= r.dropout < 1, "config key retrain.dropout must be in [0, 1)")
    _need(r.clip_grad_norm >= 0, "config key retrain.clip_grad_norm must be >= 0 (0 turns "
                                 "clipping off)")


def from_dict(values: dict) -> Config:
    return validate(_build(Config, values))


# keys earlier versions had and this one removed: (section, key) -> (the value that does what
# this version does, None where no value does; why it went). A user's file naming one is
# refused with why; a saved run's config drops it, and a resume refuses a run that set one to
# anything else, which this version would continue differently.
_REMOVED = {
    ("loss", "target_exponent"): (None, "the target form was once CE * max(1, LAT/T)^exponent; "
                                        "docs/search.md, Loss, says why it went"),
    ("search", "weight_sampling"): ("theta", "weight steps on uniformly drawn networks found "
                                             "worse networks than on theta's samples; "
                                             "docs/notebook/removed-switches.md"),
    ("search", "theta_gradient"): ("all", "a hard theta step running only the sampled "
                                          "candidate moves theta by the latency term alone; "
                                          "docs/search.md, Supernet"),
    ("loss", "multiplier_pace"): ("fixed", "the multiplier at theta's pace found worse networks "
                                           "than at the fixed pace; "
                                           "docs/notebook/removed-switches.md"),
}

# values that earlier versions wrote into run configs under another name: (section, key) ->
# {old: new}. search.cost "flops" counted torch's FLOPs, 2 per multiply-add; a resumed run
# counts its cost in multiply-adds, half of that, so the paper loss's log LAT drops by
# log 2. A user's file naming an old value is refused with the new name (see _choices).
_RENAMED = {("search", "cost"): {"flops": "macs"}}

# keys added since a run could have been saved, with the value that reproduces what that run
# did: a run saved before loss.target_on existed penalised its Gumbel samples' latency, and
# a retrain saved before retrain.zero_init_residual existed started its blocks at unit scale,
# a search saved before search.theta_relaxation existed drew Gumbel samples in theta steps,
# a retrain saved before retrain.clip_grad_norm existed did not clip its gradients, and a
# budget search saved before loss.target_floor existed returned the most probable network
# under its budget, however far under
_ADDED = {("loss", "target_on"): "sample", ("retrain", "zero_init_residual"): False,
          ("search", "theta_relaxation"): "gumbel", ("retrain", "clip_grad_norm"): 0.0,
          ("loss", "target_floor"): 0.0, ("retrain", "memory_format"): "contiguous",
          ("search", "rerank"): 0, ("search", "rerank_by"): "top1"}


def from_saved(values: dict, resuming: bool = False) -> Config:
    """The config a checkpoint recorded, less the keys this version removed and with the
    values it renamed under their new names; ``resuming``: refuse a removed key set to other
    than what this version does, as a resume would not continue that run."""
    values = copy.deepcopy(values)
    for (section, key), (kept, why) in _REMOVED.items():
        part = values.get(section)
        if not isinstance(part, dict) or key not in part:
            continue
        value = part.pop(key)
        if resuming and kept is not None and value != kept:
            raise UsageError(f"this run was started with {section}.{key}: {value}, which this "
                             f"version of fbnas removed ({why}); it cannot be continued the "
                             "same way: start a new run")
    for (section, key), names in _RENAMED.items():
        part = values.get(section)
        if isinstance(part, dict) and isinstance(part.get(key), str) and part[key] in names:
            part[key] = names[part[key]]
    for (section, key), old in _ADDED.items():
        # a saved config without the section lacks the key as much as one without the key
        part = values.setdefault(section, {})
        if isinstance(part, dict):
            part.setdefault(key, old)
    return from_dict(values)


def bundled_configs() -> dict[str, Any]:
    """Names of the configs that ship in fbnas/configs, mapped to their files."""
    return bundled("configs")


def _config_source(name_or_path: str | Path, folder: Path | None = None) -> Any:
    """The file a ``--config`` or ``base:`` value names: a path (relative to ``folder`` when
    given), or a bundled config name."""
    if names_a_file(name_or_path, folder):
        p = Path(name_or_path) if folder is None else folder / name_or_path
        if not p.is_file():
            raise UsageError(f"config file {p} does not exist")
        return p
    configs = bundled_configs()
    if str(name_or_path) not in configs:
        raise UsageError(f"unknown config {brief(str(name_or_path))}: give a YAML file path or "
                         f"one of {', '.join(configs) or '(none found)'}")
    return configs[str(name_or_path)]


def read_config_file(name_or_path: str | Path) -> dict:
    """The keys of a config file (a path or a bundled name) over those of its ``base:``."""
    return _read_with_bases(_config_source(name_or_path), ())


def _read_with_bases(source: Any, chain: tuple[str, ...]) -> dict:
    raw = load_yaml(source, "config file")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UsageError(f"config file {source} must hold a mapping at the top level")
    chain = (*chain, _identity(source))
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base:
        raise UsageError(f"config key base in {source} must be a bundled config name or a YAML "
                         f"file path, got {brief(base)}")
    # a path in base: is relative to the folder of the file that names it
    parent = _config_source(base, source.parent if isinstance(source, Path) else None)
    if _identity(parent) in chain:
        raise UsageError(f"config file {source}: base {brief(base)} leads back to {parent}; "
                         "remove one of the base: keys")
    return _merge(_read_with_bases(parent, chain), raw)


def _identity(source: Any) -> str:
    return str(source.resolve()) if isinstance(source, Path) else str(source)


def _put(values: dict, keys: list[str], value: Any, what: str) -> None:
    """Set ``values[k1][k2]...`` to ``value``, making sections on the way; ``what`` names
    the override in the error when a key on the way is a value, not a section."""
    node = values
    for k in keys[:-1]:
        if not isinstance(node.setdefault(k, {}), dict):
            raise UsageError(f"{what}: {k} is not a section")
        node = node[k]
    node[keys[-1]] = value


def load_config(path: str | Path | None = None, overrides: list[str] = (),
                base: dict | None = None, options: dict[str, Any] | None = None) -> Config:
    """Defaults, then ``base`` (e.g. a resumed run's config), then a config file (a path or a
    bundled name, with its own ``base:`` beneath it), then ``options``, then ``--set``; a
    ``--set`` that gives a key one of ``options`` sets another value is refused.

    ``options`` maps dotted keys to values that are already typed (a command's named
    options: ``{"data.dir": "2024", "run.seed": 3}``); they are validated like a file's
    values but never parsed, so a folder named 2024 or on stays a folder name. Paths become
    strings. ``overrides`` are the user's ``key=value`` strings, whose values are YAML."""
    values: dict = copy.deepcopy(base) if base else {}
    if path is not None:
        values = _merge(values, read_config_file(path))
    for key, value in (options or {}).items():
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        _put(values, key.split("."), value, f"option for {key}")
    for item in overrides:
        keys, value = parse_override(item)
        _refuse_contradiction(options or {}, keys, value, item)
        _put(values, keys, value, f"--set {brief(item)}")
    return from_dict(values)


#: the named options of the commands, by the config key each sets: how an error names them
OPTION_OF_KEY = {"space": "--space", "lut": "--lut", "data.dir": "--data-dir",
                 "data.download": "--download", "search.epochs": "--epochs",
                 "retrain.epochs": "--epochs", "search.mode": "--mode", "run.seed": "--seed",
                 "run.device": "--device", "run.threads": "--threads",
                 "loss.form": "--target-ms", "loss.target_ms": "--target-ms",
                 "retrain.arch": "ARCH", "retrain.name": "--name"}


def _flat(keys: list[str], value: Any) -> list[tuple[str, Any]]:
    """An override as (dotted key, value) pairs: one, or one per key of a mapping it sets."""
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _flat(keys + [str(k)], v)]
    return [(".".join(keys), value)]


def _refuse_contradiction(options: dict[str, Any], keys: list[str], value: Any,
                          item: str) -> None:
    """Refuse a ``--set`` that gives a key a named option gave another value: which one the
    user meant is not known (``fbnas pick --target-ms 1.5 --set loss.target_ms=3`` searched
    under 3 ms and named the result after 1.5, and ``--set loss.form=paper`` beside
    ``--target-ms`` was told to give --target-ms). The same value twice is fine."""
    for key, new in _flat(keys, value):
        if key not in options:
            continue
        old = options[key]
        old = os.fspath(old) if isinstance(old, os.PathLike) else old
        if new != old or isinstance(new, bool) != isinstance(old, bool):
            option = OPTION_OF_KEY.get(key, f"the option for {key}")
            raise UsageError(f"--set {brief(item)} contradicts {option}, which sets {key} to "
                             f"{brief(old)}; give the value once, with {option} or with --set")


def dump(cfg: Config) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


#: where the reference :func:`reference` renders lives in a checkout (`make docs` writes it)
REFERENCE_PATH = "docs/config.md"


def _type_name(tp: Any) -> str:
    """A key's type as the reference names it ("integer or null")."""
    if typing.get_origin(tp) is typing.Union:
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return f"{_type_name(inner)} or null"
    return {str: "string", int: "integer", float: "number", bool: "true/false"}[tp]


def _yaml_value(value: Any) -> str:
    """A default as a config file would write it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, "g")
    return f'"{value}"' if value == "" else str(value)


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|")


def _key_rows(cls: type, prefix: str) -> tuple[list[str], list[tuple[str, type, str]]]:
    """The table rows of ``cls``'s keys (dotted under ``prefix``), and its sections as
    (dotted name, dataclass, what it holds)."""
    rows, sections, hints = [], [], _hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            sections.append((prefix + f.name, hints[f.name], f.metadata["doc"]))
            continue
        choices = ", ".join(f"`{c}`" for c in f.metadata.get("choices", ()))
        rows.append(f"| `{prefix}{f.name}` | {_type_name(hints[f.name])} | "
                    f"`{_yaml_value(f.default)}` | {choices} | {_cell(f.metadata['doc'])} |")
    return rows, sections


def reference() -> str:
    """Every config key as markdown: key, type, default, the values it takes and one line of
    what it does, section by section, then the rules of ``search.rerank_by``. It is
    docs/config.md; `make docs` (``python -m fbnas.config docs/config.md``) writes it, and a
    test fails while the file differs from it."""
    import textwrap

    def para(text: str) -> list[str]:
        return [textwrap.fill(text, 92, break_on_hyphens=False, break_long_words=False), ""]

    head = "| key | type | default | values | what it does |\n| --- | --- | --- | --- | --- |"
    out = ["# Config reference", "", *para(
           "Every key of a run config, as `fbnas/config.py` declares it: a config file sets "
           "it by section (`search:` then `epochs: 8`), `--set search.epochs=8` by its "
           "dotted name. A file names only what it changes; an unknown key, a value of the "
           "wrong type or outside the listed values is refused with the key's name. How "
           "configs build on each other: [Searching, Config](search.md#config)."),
           *para("Written from `fbnas/config.py` by `make docs`; edit the declarations "
                 "there, not this file.")]
    todo = [("", Config, "")]
    while todo:
        prefix, cls, doc = todo.pop(0)
        rows, sections = _key_rows(cls, f"{prefix}." if prefix else "")
        out += [f"## {prefix or 'Top level'}", ""]
        out += para(doc) if doc else []
        if rows:
            out += [head, *rows, ""]
        todo[:0] = sections  # a section's own sections follow it
    out += ["## search.rerank_by rules", "", *para(
            f"The figures each rule compares the checked networks by (the first breaks ties): "
            f"{FIGURES_DOC}. `fbnas pick` decides by the rules without `top1`."),
            "| rule | figures | how |", "| --- | --- | --- |"]
    out += [f"| `{rule}` | {', '.join(figures)} | {how(rule)} |"
            for rule, figures in RERANK_RULES.items()]
    return "\n".join(out) + "\n"


def write_reference(path: str | Path = REFERENCE_PATH) -> None:
    """Write :func:`reference` to ``path`` atomically."""
    from fbnas.io import atomic_write

    atomic_write(path, lambda tmp: tmp.write_text(reference()))


if __name__ == "__main__":  # python -m fbnas.config [PATH]: the reference, to PATH or stdout
    import sys

    if len(sys.argv) > 1:
        write_reference(sys.argv[1])
    else:
        sys.stdout.write(reference())
