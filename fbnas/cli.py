"""The fbnas command line: parse, call a library function, map errors to exit codes."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import click

import fbnas
from fbnas.arch.limits import MAX_BATCH
from fbnas.errors import FbnasError, capped
from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME, DEFAULT_RUNTIME, RUNTIMES
from fbnas.runs.deploy import CALIBRATION_IMAGES
from fbnas.search.pick import DEFAULT_NETWORKS, PICK_RULES

#: most architectures one `fbnas sample` draws into a file
MAX_DRAWS = 10_000
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
#: errors of the machine, not of fbnas: reported in one line instead of a traceback
ENVIRONMENT_ERRORS = {errno.ENAMETOOLONG, errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM,
                      errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.EIO}


def _finite(ctx, param, value):
    """Refuse inf, nan and numbers too large to compute with, which click's FloatRange lets
    through (profile --extra-time nan ran forever; --block-time inf stopped with a traceback;
    --target-ms 1e308 overflowed the budget's arithmetic), by the check config keys get
    (:func:`fbnas.config.number_problem`): a latency budget (metavar MS) is bounded as
    ``loss.target_ms`` is, ``--extra-time`` as the device runner's, any other float option
    by the largest float32."""
    from fbnas.config import BUDGET_WHY, MAX_BUDGET_MS, number_problem
    from fbnas.latency.device_runner import MAX_EXTRA_TIME

    if value is None:
        return value
    if param.metavar == "MS":
        bound = (MAX_BUDGET_MS, BUDGET_WHY, "ms")
    elif param.name == "extra_time":
        bound = (MAX_EXTRA_TIME, "a week of extra rounds", "s")
    else:
        bound = ()
    problem = number_problem(value, *bound)
    if problem:
        raise click.BadParameter(problem)
    return value


_BLOCK_TIME = click.option("--block-time", default=DEFAULT_BLOCK_TIME, show_default=True,
                           type=click.FloatRange(min=0.0001, max=10.0), callback=_finite,
                           help="Seconds per timed block of calls.")


class Group(click.Group):
    """Turns FbnasError into a one-line message and exit code, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except FbnasError as e:
            from fbnas.runs.dist import env_rank

            rank = env_rank()
            # under torchrun an error every rank raised alike is printed once, by rank 0
            if rank == 0:
                click.echo(f"error: {capped(str(e))}", err=True)
            elif not getattr(e, "on_every_rank", False):
                click.echo(f"error (process {rank}): {capped(str(e))}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except OSError as e:
            # the file system said no where no check of fbnas's could have known it would: a
            # full disk, a name too long, a read-only or vanished folder
            if e.errno not in ENVIRONMENT_ERRORS:
                raise
            where = f": {e.filename}" if e.filename else ""
            click.echo(f"error: {capped(f'{e.strerror}{where}')}", err=True)
            sys.exit(1)
        except click.ClickException as e:
            # click's own refusals echo the value given (an option's argument can be 128 KB)
            e.message = capped(e.message)
            raise


@click.group(cls=Group, context_settings=CONTEXT)
@click.version_option(fbnas.__version__, "--version", prog_name="fbnas")
def main() -> None:
    """FBNet-style hardware-aware differentiable neural architecture search.

    \b
    The usual chain:
      fbnas profile --space fbnet_cifar --out lookup_tables/mine.json
      fbnas train --config fbnet_cifar --lut lookup_tables/mine.json --out runs/search
      fbnas sample runs/search --hard --out arch.json
    """


@main.command(context_settings=CONTEXT)
@click.option("--space", "space_name", required=True,
              help="Bundled space name (fbnet_cifar, fbnet_imagenet, fbnet_imagenet100, "
                   "nasbench_macro, tiny) or a space YAML file.")
@click.option("--out", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the lookup table (JSON); not with --bundle.")
@click.option("--bundle", default=None, type=click.Path(path_type=Path), metavar="DIR",
              help="Time nothing: write a folder to copy to the device the network will run on "
                   "(every entry and the calibration networks as ONNX files, manifest.json, "
                   "run.py, which needs only Python 3 with onnxruntime and numpy there).")
@click.option("--precision", default="fp32", show_default=True,
              type=click.Choice(["fp32", "int8"]),
              help="With --bundle: int8 quantizes every file (ONNX Runtime static QDQ, "
                   "per-channel weights); networks need --data-dir for it.")
@click.option("--networks", default=50, show_default=True, type=click.IntRange(min=5),
              help="With --bundle: random whole networks for the calibration (as fbnas "
                   "calibrate --networks; 2 of every 5, at most 20, fit it).")
@click.option("--data-dir", default=None,
              help="With --bundle --precision int8: CIFAR-10 (python format) whose training "
                   "images calibrate the networks' quantization.")
@click.option("--jobs", default=0, type=click.IntRange(min=0),
              help="With --bundle: processes exporting the files in parallel (nothing is "
                   "timed; the bundle is the same for any number) [default: the usable "
                   "cores, at most 8].")
@click.option("--from-results", default=None, type=click.Path(dir_okay=False, path_type=Path),
              metavar="RESULTS",
              help="Time nothing: turn the results a bundle's run.py wrote on the device into "
                   "the table --out, calibrated on the bundle's networks.")
@click.option("--runtime", default=DEFAULT_RUNTIME, show_default=True,
              type=click.Choice(RUNTIMES),
              help="What runs the timed entries: onnxruntime (each entry exported as fbnas "
                   "export --format onnx exports a network, run by ONNX Runtime on the CPU, "
                   "where exported networks are deployed) or eager PyTorch. Recorded in the "
                   "table, which is then used only with that runtime.")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1),
              help="Intra-op threads while timing, torch's or ONNX Runtime's (which gets 1 "
                   "inter-op thread); recorded in the table.")
@click.option("--batch", default=1, show_default=True, type=click.IntRange(1, MAX_BATCH),
              help="Batch size of the timed inputs.")
@click.option("--rounds", default=80, show_default=True, type=click.IntRange(min=1),
              help="Rounds that time every entry once.")
@click.option("--extra-time", default=50.0, show_default=True, type=click.FloatRange(min=0),
              callback=_finite,
              help="Seconds of further rounds, only for candidates whose order against their "
                   "layer's fastest is not yet settled (within 3% and 3 standard errors) and "
                   "for noisy entries.")
@_BLOCK_TIME
@click.option("--check", "check_n", default=0, show_default=True, type=click.IntRange(min=0),
              help="After profiling, calibrate and check on N random networks (see calibrate).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--force", is_flag=True, help="Overwrite an existing table (or bundle folder).")
@click.pass_context
def profile(ctx, space_name, out, bundle, precision, networks, data_dir, jobs, from_results,
            runtime, threads, batch, rounds, extra_time, block_time, check_n, seed, force):
    """Time every candidate op at every searchable layer into a latency lookup table.

    With --runtime onnxruntime (the default) every distinct entry, the stem and the head are
    exported to ONNX once and timed as their own small graphs.

    For another device: --bundle DIR writes those graphs and the calibration networks to a
    folder, without timing; copy it to the device and run python DIR/run.py --out
    results.json there (Python 3 with onnxruntime and numpy, no fbnas); then --from-results
    results.json --out TABLE makes the table here.

    \b
    Examples:
      fbnas profile --space fbnet_cifar --out lookup_tables/fbnet_cifar_ort.json --threads 1
      fbnas profile --space fbnet_cifar --bundle fbnet_cifar_bundle
      fbnas profile --space fbnet_cifar --from-results results.json --out device.json
    """
    from fbnas.latency import profiling

    profiling.check_mode(_given(ctx), out, bundle, precision, data_dir, from_results, check_n)
    if bundle is not None:
        from fbnas.runs.calibration_images import bundle_command

        bundle_command(space_name, bundle, data_dir, precision=precision, batch=batch,
                       networks=networks, seed=seed, jobs=jobs, force=force, echo=click.echo)
    elif from_results is not None:
        profiling.table_from_results(space_name, from_results, out, force=force, echo=click.echo)
    else:
        profiling.profile_here(space_name, out, runtime, threads=threads, batch=batch,
                               rounds=rounds, extra_time=extra_time, block_time=block_time,
                               check=check_n, seed=seed, force=force, echo=click.echo)


def _given(ctx: click.Context) -> dict[str, str]:
    """The options the user typed (or set in the environment), by name, with their flags."""
    sources = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    return {p.name: max(p.opts, key=len) for p in ctx.command.params
            if ctx.get_parameter_source(p.name) in sources}


@main.command(context_settings=CONTEXT)
@click.argument("lut_path", metavar="LUT", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--networks", default=50, show_default=True, type=click.IntRange(min=4),
              help="Random networks to time.")
@click.option("--fit", default=20, show_default=True, type=click.IntRange(min=2),
              help="How many of them fit the calibration; the rest test it.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--rounds", default=60, show_default=True, type=click.IntRange(min=2),
              help="Rounds that time every network and entry once (even and odd rounds give "
                   "the two timings of the noise floor).")
@_BLOCK_TIME
@click.option("--runtime", default=None, type=click.Choice(RUNTIMES),
              help="Runtime to time the networks in; must be the table's [default: the "
                   "table's].")
@click.option("--dry-run", is_flag=True, help="Report only; leave the table unchanged.")
@click.option("--force", is_flag=True, help="Replace an existing calibration.")
def calibrate(lut_path, networks, fit, seed, rounds, block_time, runtime, dry_run, force):
    """Measure random whole networks, report the table's fidelity, store a calibration.

    Networks are timed in the table's runtime (exported to ONNX for onnxruntime) with the
    profile's protocol, in shared rounds together with re-timed table entries; even and odd
    rounds are two independent timings. Prints signed bias, MAPE,
    share within +-10% and Kendall tau for the raw table, the calibrated table (a * sum + b,
    fitted on --fit networks, scored on the rest) and multiply-adds (MACs, fitted the same
    way), next to the noise floor (the two timings of the same networks).

    \b
    Example:
      fbnas calibrate lookup_tables/fbnet_cifar_ort.json --networks 50 --fit 20
    """
    from fbnas.latency.fidelity import calibrate_table_file

    calibrate_table_file(lut_path, networks=networks, fit=fit, seed=seed, rounds=rounds,
                         block_time=block_time, runtime=runtime, dry_run=dry_run, force=force,
                         echo=click.echo)


@main.command("show-lut", context_settings=CONTEXT)
@click.argument("lut_path", metavar="LUT", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--space", "space_name", default=None,
              help="Also check the table against this space.")
def show_lut(lut_path, space_name):
    """Validate a lookup table and print its summary.

    \b
    Example:
      fbnas show-lut lookup_tables/fbnet_cifar_ort.json --space fbnet_cifar
    """
    from fbnas.latency.lut import show_table

    click.echo(show_table(lut_path, space_name))


_RUN_OPTIONS = [
    click.option("--config", "config_path", metavar="NAME|FILE",
                 type=click.Path(dir_okay=False, path_type=Path),
                 help="Bundled config name (fbnet_cifar, tiny) or a YAML config file, which may "
                 "start from another with 'base: NAME_OR_FILE'."),
    click.option("--data-dir", help="Folder with cifar-10-batches-py/ or an image folder "
                 "(data.dir) [default: data/cifar10]."),
    click.option("--out", type=click.Path(file_okay=False, path_type=Path),
                 help="Run directory: config, log, TensorBoard, checkpoints "
                 "[default: runs/search for train, runs/retrain for retrain]."),
    click.option("--epochs", type=click.IntRange(min=1), help="Total epochs."),
    click.option("--seed", type=int, help="Seed for splits, init, data order and noise."),
    click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), help="Where to train."),
    click.option("--threads", type=click.IntRange(min=1), help="torch intra-op threads."),
    click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                 help="Override any config key, e.g. --set optim.weights.lr=0.05 (repeatable)."),
    click.option("--download", is_flag=True, help="Download CIFAR-10 into the data dir if "
                 "missing."),
    click.option("--resume", is_flag=True, help="Continue the run in --out where it stopped."),
    click.option("--force", is_flag=True, help="Start over in a non-empty --out."),
]


def run_options(f):
    """The options train and retrain share."""
    for option in reversed(_RUN_OPTIONS):
        f = option(f)
    return f


@main.command(context_settings=CONTEXT)
@run_options
@click.option("--space", "space_name", help="Search space name or YAML file (config key space).")
@click.option("--lut", help="Lookup table JSON (config key lut).")
@click.option("--mode", type=click.Choice(["soft", "hard"]), help="Supernet forward mode.")
@click.option("--target-ms", type=click.FloatRange(min=0, min_open=True), metavar="MS",
              callback=_finite, help="Latency budget: search for the most accurate network whose "
              "predicted latency is about MS and at most MS (loss.form=target, loss.target_ms=MS).")
@click.option("--nproc", type=click.IntRange(min=1),
              help="Run N processes on this machine with DistributedDataParallel (launches "
              "torchrun --standalone; data.batch_size is per process).")
@click.pass_context
def train(ctx, config_path, data_dir, out, epochs, seed, device, threads, overrides, download,
          resume, force, space_name, lut, mode, target_ms, nproc):
    """Search: train the Gumbel-softmax supernet with alternating weight/theta optimizers.

    The weights train on the cross-entropy; theta on CE * alpha * (log LAT)^beta with LAT
    the sampled latency in microseconds (the paper's loss; loss.beta moves the trade-off,
    higher is faster), or with --target-ms on CE + weight * |LAT / budget - 1|, which lands
    on the budget: fbnas sample --hard then returns the most probable network within it.
    Writes RUN_DIR/pictures/ (softmax(theta) heatmaps, progress chart) and warns when the
    supernet stops learning or theta collapses to skip. Options given here override the
    config file, and --set any key; a --set that contradicts an option is refused.

    \b
    Examples:
      fbnas train --config tiny --out runs/tiny
      fbnas train --config fbnet_cifar --data-dir /data/cifar10 --out runs/c10
      fbnas train --config fbnet_cifar --target-ms 1.5 --out runs/c10_1.5ms
      fbnas train --out runs/c10 --resume
      fbnas train --config my_search.yaml --out runs/mine --nproc 2
    """
    from fbnas.search.run import search_command

    budget = {} if target_ms is None else {"loss.form": "target", "loss.target_ms": target_ms}
    search_command(config_path, out or Path("runs/search"), resume, force, overrides, download,
                   {"space": space_name, "lut": lut, "data.dir": data_dir,
                    "search.epochs": epochs, "search.mode": mode, "run.seed": seed,
                    "run.device": device, "run.threads": threads, **budget}, nproc=nproc,
                   command_line=[(max(p.opts, key=len), ctx.params[p.name])
                                 for p in ctx.command.params if p.name != "nproc"],
                   echo=click.echo)


@main.command(context_settings=CONTEXT)
@click.argument("arch", metavar="ARCH", required=False,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", help="Which architecture of ARCH (optional if it holds one).")
@run_options
def retrain(arch, name, config_path, data_dir, out, epochs, seed, device, threads, overrides,
            download, resume, force):
    """Train a sampled architecture from scratch and report its test accuracy.

    SGD with momentum and the cosine schedule of optim.weights, label smoothing
    (retrain.label_smoothing), the search's augmentation, on all training images except the
    held-out part; the same run directory, checkpoints and --resume as train. Export the
    result with: fbnas export ARCH --weights RUN_DIR/checkpoints/last.pt.

    \b
    Example:
      fbnas retrain runs/search/arch.json --name search_hard --out runs/retrain --epochs 30
    """
    from fbnas.runs.retrain import retrain_command

    retrain_command(arch, config_path, out or Path("runs/retrain"), resume, force, overrides,
                    download, {"retrain.name": name, "data.dir": data_dir,
                               "retrain.epochs": epochs, "run.seed": seed,
                               "run.device": device, "run.threads": threads}, echo=click.echo)


@main.command(context_settings=CONTEXT)
@click.argument("source", metavar="RUN_DIR_OR_CHECKPOINT", type=click.Path(path_type=Path))
@click.option("--hard", is_flag=True,
              help="Take each layer's most probable op (argmax theta) instead of drawing.")
@click.option("--target-ms", default=None, type=click.FloatRange(min=0, min_open=True),
              metavar="MS", callback=_finite,
              help="With --hard: pick the most probable architecture under softmax(theta) "
                   "whose calibrated predicted latency is at most MS milliseconds (exact) "
                   "[default: the search's latency budget, loss.target_ms, if it had one].")
@click.option("--floor", default=None, type=click.FloatRange(min=0, max=1, max_open=True),
              metavar="SHARE", callback=_finite,
              help="With a budget: the network must spend at least SHARE of it, where any "
                   "network of the space does (0: any network under it) [default: the "
                   "search's loss.target_floor].")
@click.option("--num", default=1, show_default=True, type=click.IntRange(1, MAX_DRAWS),
              help="Architectures to draw from softmax(theta) (not with --hard).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the draws.")
@click.option("--name", default=None,
              help="Name in the file [default: RUN_hard, or RUN_seedS_I for draw I].")
@click.option("--out", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Architecture file to add to [default: RUN_DIR/arch.json].")
@click.option("--lut", "lut_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Lookup table for predictions [default: the one the search used].")
@click.option("--force", is_flag=True, help="Replace architectures of the same name.")
def sample(source, hard, target_ms, num, seed, name, out, lut_path, force, floor):
    """Sample architectures from a search's theta into an architecture file (JSON).

    RUN_DIR_OR_CHECKPOINT is a run folder of fbnas train (its checkpoints/last.pt is
    used) or a search checkpoint file (for example a copy of last.pt kept from an earlier
    epoch). The file holds many named architectures; each records its model definition,
    predicted latency, multiply-adds (MACs), params, theta probabilities and the hashes of its
    checkpoint, lookup table and space.
    With --hard and a latency budget (--target-ms, or the search's own), the architecture
    is the most probable one predicted within the budget, found exactly.

    \b
    Example:
      fbnas sample runs/search --hard
      fbnas sample runs/search --hard --target-ms 1.5 --name search_1.5ms
      fbnas sample runs/search --num 10 --seed 1 --out archs.json
      python -c "import fbnas; print(fbnas.build_model('runs/search/arch.json', 'search_hard'))"
    """
    from fbnas.search.sample_file import sample_to_file

    sample_to_file(source, hard=hard, target_ms=target_ms, num=num, seed=seed, name=name,
                   out=out, lut_path=lut_path, force=force, floor=floor, echo=click.echo)


@main.command(context_settings=CONTEXT)
@click.option("--target-ms", required=True, type=click.FloatRange(min=0, min_open=True),
              metavar="MS", callback=_finite,
              help="Latency budget: the network's calibrated predicted latency is at most MS "
                   "and at least loss.target_floor of it where the space allows.")
@click.option("--config", "config_path", help="Config file or bundled name: its space, table, "
              "data and search settings shape the prior [default: the defaults].")
@click.option("--space", "space_name", help="Search space name or YAML file (config key space).")
@click.option("--lut", help="Lookup table JSON (config key lut).")
@click.option("--data-dir", help="Folder with cifar-10-batches-py/ or an image folder, whose "
              "first training images NASWOT scores on (data.dir).")
@click.option("--networks", default=DEFAULT_NETWORKS, show_default=True,
              type=click.IntRange(min=2),
              help="How many of the prior's most probable networks within the budget to score.")
@click.option("--rule", default=PICK_RULES[0], show_default=True,
              type=click.Choice(PICK_RULES),
              help="Keep the best NASWOT z-score plus a quarter of the prior's, or NASWOT alone.")
@click.option("--seed", type=int, help="Seed of the prior's theta steps and the data splits.")
@click.option("--threads", type=click.IntRange(min=1), help="torch intra-op threads.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override any config key, e.g. --set loss.target_floor=0.8 (repeatable).")
@click.option("--download", is_flag=True, help="Download CIFAR-10 into the data dir if missing.")
@click.option("--out", default=Path("runs/pick/arch.json"), show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Architecture file to add to.")
@click.option("--name", default=None, help="Name in the file [default: pick_MSms].")
@click.option("--force", is_flag=True, help="Replace an architecture of the same name.")
def pick(target_ms, config_path, space_name, lut, data_dir, networks, rule, seed, threads,
         overrides, download, out, name, force):
    """Pick a network under a latency budget without training a supernet.

    A prior from the latency term alone (theta moved by the search loss's cost term, as many
    steps as a search of the config would take), its most probable networks within the
    budget, each scored by NASWOT (one forward pass of an untrained copy on a batch of
    training images), the best written to an architecture file as fbnas sample writes one.
    Minutes, not hours. It was judged on NAS-Bench-Macro only, and NASWOT's ranking
    elsewhere is not known: fbnas train is the method, this a fast second opinion
    (docs/search.md; evidence in docs/results.md).

    \b
    Example:
      fbnas pick --config configs/macro.yaml --target-ms 1.8
      fbnas retrain runs/pick/arch.json --name pick_1.8ms --out runs/pick_1.8
    """
    from fbnas.search.pick import pick_command

    pick_command(target_ms, config_path, overrides,
                 {"space": space_name, "lut": lut, "data.dir": data_dir, "run.seed": seed,
                  "run.threads": threads, "data.download": download or None}, out, name,
                 networks, rule, force, echo=click.echo)


def _arch_options(f):
    f = click.option("--name", default=None,
                     help="Architecture in the file (needed when it holds several).")(f)
    f = click.argument("arch_path", metavar="ARCH",
                       type=click.Path(dir_okay=False, path_type=Path))(f)
    return f


@main.command(context_settings=CONTEXT)
@_arch_options
@click.option("--lut", "lut_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Lookup table to predict with [default: the one the architecture records].")
@click.option("--runtime", default=None, type=click.Choice(RUNTIMES),
              help="What runs the network: onnxruntime (exported as fbnas export --format "
                   "onnx exports it) or eager PyTorch; must be the table's [default: the "
                   f"table's, else {DEFAULT_RUNTIME}].")
@click.option("--threads", default=None, type=click.IntRange(min=1),
              help="Intra-op threads, torch's or ONNX Runtime's [default: the table's, else "
                   "1].")
@click.option("--batch", default=None, type=click.IntRange(1, MAX_BATCH),
              help="Batch size [default: the table's, else 1].")
@click.option("--rounds", default=60, show_default=True, type=click.IntRange(min=1),
              help="Rounds, each timing the network and its table entries once.")
@_BLOCK_TIME
@click.option("--seed", default=0, show_default=True, type=int)
def latency(arch_path, name, lut_path, runtime, threads, batch, rounds, block_time, seed):
    """Measure an architecture's whole-network latency and compare it with the prediction.

    Uses the profile's protocol (warm-up, explicit threads, median of short timed blocks) in
    the table's runtime: for onnxruntime the network and its table entries are exported to
    ONNX and run by ONNX Runtime; for eager the modules run in eval mode under
    inference_mode. The prediction is the lookup table's (calibrated when the
    table has a calibration); the error is (predicted - measured) / measured. A table
    measured on another device by a bundle's run.py (fbnas profile --bundle) is timed
    against only on a machine that matches its device record (CPU model, architecture, OS;
    fp32, CPU provider); elsewhere the command prints the table's prediction alone.

    \b
    Example:
      fbnas latency runs/search/arch.json --name search_hard --threads 1
    """
    from fbnas.latency.arch_reports import latency_text

    click.echo(latency_text(arch_path, name, lut_path, runtime=runtime, threads=threads,
                            batch=batch, rounds=rounds, block_time=block_time, seed=seed))


@main.command(context_settings=CONTEXT)
@click.argument("root", metavar="IMAGENET_DIR", type=click.Path(path_type=Path))
@click.option("--num", default=100, show_default=True, type=click.IntRange(min=1),
              help="How many classes to draw.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the draw.")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Class list to write (one class folder name per line; data.classes).")
@click.option("--link", default=None, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="Also make DIR/train/<class> (and val or test) as links to "
                                  "the drawn classes' folders: a folder dataset of its own.")
@click.option("--force", is_flag=True, help="Overwrite an existing class list.")
def classes(root, num, seed, out, link, force):
    """Draw a class subset of an image folder, as the paper's ImageNet-100 is drawn from ImageNet.

    IMAGENET_DIR holds train/<class>/ (and val/<class>/) as ImageNet copies are laid out. The
    draw is from the sorted class folder names with the given seed, so the same copy and seed
    give the same classes. Use the list with data.classes (the folder stays where it is), or
    --link to make a folder of links to the drawn classes.

    \b
    Example:
      fbnas classes /data/imagenet --num 100 --seed 0 --out imagenet100.txt --link data/imagenet100
    """
    from fbnas.data.class_subset import write_class_subset

    write_class_subset(root, num, seed, out, link=link, force=force, echo=click.echo)


@main.command(context_settings=CONTEXT)
@_arch_options
@click.option("--lut", "lut_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Lookup table for per-layer latency [default: the one the architecture "
                   "records].")
def summary(arch_path, name, lut_path):
    """Print an architecture layer by layer: op, output shape, params, MACs, table latency.

    Shapes come from forward hooks on a built network; MACs (multiply-adds, what papers
    report, FBNet's "FLOPs" included) from torch's flop counter, which counts 2 per MAC.
    ARCH is a file, or the name of a bundled architecture: fbnet_a, fbnet_b, fbnet_c (the
    published FBNets of the fbnet_imagenet space, printed with the paper's figures).

    \b
    Examples:
      fbnas summary runs/search/arch.json --name search_hard
      fbnas summary fbnet_c
    """
    from fbnas.latency.arch_reports import summary_text

    click.echo(summary_text(arch_path, name, lut_path))


@main.command(context_settings=CONTEXT)
@_arch_options
@click.option("--weights", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Retrained-model checkpoint or state_dict of the network.")
@click.option("--random-weights", is_flag=True,
              help="Export freshly initialised weights (to try the export before training).")
@click.option("--format", "fmt", required=True, type=click.Choice(["pt2", "onnx"]),
              help="pt2: torch.export program; onnx: ONNX model (what onnxruntime lookup "
                   "tables time).")
@click.option("--precision", default="fp32", show_default=True,
              type=click.Choice(["fp32", "int8"]),
              help="int8 (with --format onnx): ONNX Runtime static quantization, QDQ format, "
                   "per-channel int8 weights, uint8 activations, calibrated on training "
                   "images of --data-dir.")
@click.option("--data-dir", default=None,
              help="With --precision int8: the CIFAR-10 folder (python format) the network "
                   "was trained on; its training images calibrate the quantization, its test "
                   "images compare int8 with fp32 top-1 (with --weights).")
@click.option("--calibration-images", default=None, type=click.IntRange(min=1),
              help="With --precision int8: random training images to calibrate on.  "
                   f"[default: {CALIBRATION_IMAGES}]")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Output file (.pt2 for --format pt2).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of --random-weights and of the calibration images' draw.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def export(arch_path, name, weights, random_weights, fmt, precision, data_dir,
           calibration_images, out, seed, force):
    """Export an architecture with its weights for deployment (batch size stays dynamic).

    --weights takes a retrained-model checkpoint (its architecture must match) or a plain
    state_dict of the network; --random-weights exports an untrained network instead. The
    pt2 program is loaded back and its outputs are checked against the eager model.

    --precision int8 quantizes the ONNX export (input and output stay float32) on
    --calibration-images training images of --data-dir, normalised as for training; with
    --weights it then prints the top-1 of the fp32 and the int8 model, both run by ONNX
    Runtime, on the data's test set.

    \b
    Examples:
      fbnas export runs/search/arch.json --weights runs/retrain/checkpoints/last.pt \\
          --format pt2 --out model.pt2
      fbnas export runs/search/arch.json --weights runs/retrain/checkpoints/last.pt \\
          --format onnx --precision int8 --data-dir data/cifar10 --out model_int8.onnx
    """
    from fbnas.runs.deploy import export_command

    export_command(arch_path, name, out, fmt, weights, random_weights, precision=precision,
                   data_dir=data_dir, calibration_images=calibration_images, seed=seed,
                   force=force, echo=click.echo)


if __name__ == "__main__":
    main()
