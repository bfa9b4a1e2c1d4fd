"""The fbnas command line: parse, call a library function, map errors to exit codes."""

from __future__ import annotations

import errno
import math
import os
import sys
from pathlib import Path

import click

import fbnas
from fbnas.arch.limits import MAX_BATCH
from fbnas.errors import FbnasError, UsageError
from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME, DEFAULT_RUNTIME, RUNTIMES

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
#: errors of the machine, not of fbnas: reported in one line instead of a traceback
ENVIRONMENT_ERRORS = {errno.ENAMETOOLONG, errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM,
                      errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.EIO}


def _finite(ctx, param, value):
    """Refuse inf and nan, which click's FloatRange lets through (profile --extra-time nan
    ran forever; --block-time inf stopped with a traceback)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter("must be a finite number")
    return value


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
                click.echo(f"error: {e}", err=True)
            elif not getattr(e, "on_every_rank", False):
                click.echo(f"error (process {rank}): {e}", err=True)
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
            click.echo(f"error: {e.strerror}{where}", err=True)
            sys.exit(1)


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
@click.option("--block-time", default=DEFAULT_BLOCK_TIME, show_default=True,
              type=click.FloatRange(min=0.0001, max=10.0), callback=_finite,
              help="Seconds per timed block of calls.")
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
    from fbnas.arch.space import load_space
    from fbnas.io import check_writable, refuse_overwrite
    from fbnas.latency.lut import LUT, profile_space, save_lut
    from fbnas.machine import busy_warning
    from fbnas.latency.runtimes import make_runtime

    given = {p.name for p in ctx.command.params
             if ctx.get_parameter_source(p.name) in (click.core.ParameterSource.COMMANDLINE,
                                                     click.core.ParameterSource.ENVIRONMENT)}
    flags = {p.name: max(p.opts, key=len) for p in ctx.command.params}

    def refuse(names, why):
        bad = [flags[n] for n in names if n in given]
        if bad:
            raise UsageError(f"{bad[0]} does not apply {why}; drop it")

    timing = ("runtime", "threads", "rounds", "extra_time", "block_time", "check_n")
    if bundle is not None and from_results is not None:
        raise UsageError("--bundle writes a folder for the device and --from-results reads its "
                         "results back; pick one")
    if bundle is not None:
        refuse(timing, "to --bundle (the device's run.py times the bundle and takes --threads, "
                       "--rounds, --extra-time, --block-time there)")
        if out is not None:
            raise UsageError("--bundle writes a folder, not a table; drop --out (the table "
                             "comes from --from-results later)")
        if data_dir is not None and precision != "int8":
            raise UsageError("--data-dir calibrates int8 quantization; add --precision int8 or "
                             "drop it")
        from fbnas.latency.bundle import write_bundle

        space = load_space(space_name)
        images = source = None
        if precision == "int8" and data_dir is not None:
            import torch

            from fbnas.data.batches import normalize
            from fbnas.data.memory import load_dataset
            from fbnas.latency.bundle import NETWORK_CALIBRATION_IMAGES

            data = load_dataset(data_dir, "cifar10", resolution=space.resolution)
            pick = torch.randperm(len(data.train_images),
                                  generator=torch.Generator().manual_seed(seed))
            pick = pick[:NETWORK_CALIBRATION_IMAGES]
            images = normalize(data.train_images[pick], data.mean, data.std).numpy()
            source = str(data_dir)
        if not jobs:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
            jobs = min(8, cores or os.cpu_count() or 1)
        manifest = write_bundle(space, bundle, precision=precision, batch=batch,
                                networks=networks, seed=seed, images=images,
                                images_source=source, force=force, source=str(space_name),
                                jobs=jobs)
        cal = manifest["calibration"]
        click.echo(f"bundle for space {space.name} (hash {space.hash}): "
                   f"{len(manifest['entries'])} entries, {cal['networks']} calibration networks "
                   f"({cal['fit']} fit), {precision}, batch {batch}, opset {manifest['opset']}, "
                   f"{manifest['total_bytes'] / 1e6:.1f} MB, exported in "
                   f"{manifest['export']['seconds']:.0f} s")
        click.echo(f"wrote {bundle}")
        click.echo("next: copy it to the device and run there (Python 3 with onnxruntime and "
                   f"numpy): python {bundle}/run.py --out results.json --threads 1")
        click.echo(f"then here: fbnas profile --space {space_name} --from-results results.json "
                   "--out TABLE.json")
        return
    refuse(("precision", "networks", "data_dir", "jobs"), "without --bundle")
    if from_results is not None:
        refuse(timing + ("batch", "seed"), "to --from-results (the results hold the device's "
                                           "timings and the bundle's settings)")
        if out is None:
            raise UsageError("--from-results needs --out TABLE, the lookup table to write")
        from fbnas.latency.device import device_table

        space = load_space(space_name)
        refuse_overwrite(out, force)
        check_writable(out)
        data, report, problem = device_table(space, from_results, source=str(space_name))
        click.echo(report.text())
        if problem is not None:
            from fbnas.errors import warn_stderr

            warn_stderr(problem)
        save_lut(data, out, force=force)
        click.echo(LUT(data, out).summary())
        click.echo(f"wrote {out}")
        return
    if out is None:
        raise UsageError("give --out TABLE (or --bundle DIR to time on another device)")
    if 0 < check_n < 5:
        raise UsageError("--check needs at least 5 networks (2 of every 5 fit, the rest test)")
    space = load_space(space_name)
    refuse_overwrite(out, force)
    check_writable(out)  # before minutes of profiling, not after
    busy = busy_warning(threads, "profiling")
    if busy:  # other processes' threads inflate every timing, and not evenly
        click.echo(f"warning: {busy}; a table timed now is not to be trusted", err=True)
    rt = make_runtime(runtime, threads)  # shared with --check, which re-times the entries
    data = profile_space(space, threads=threads, batch=batch, rounds=rounds,
                         extra_time=extra_time, block_time=block_time, seed=seed,
                         source=str(space_name), runtime=rt)
    if check_n:
        from fbnas.latency.fidelity import calibrate_lut

        # 2 of every 5 networks fit the calibration (20 of 50), the rest score it
        fit = min(20, max(2, check_n * 2 // 5))
        report = calibrate_lut(LUT(data), networks=check_n, fit=fit, seed=seed,
                               block_time=block_time, runtime=rt)
        click.echo(report.text())
        data["calibration"] = report.calibration()
    save_lut(data, out, force=force)
    click.echo(LUT(data, out).summary())
    click.echo(f"wrote {out}")


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
@click.option("--block-time", default=DEFAULT_BLOCK_TIME, show_default=True,
              type=click.FloatRange(min=0.0001, max=10.0), callback=_finite,
              help="Seconds per timed block of calls.")
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
    from fbnas.io import check_writable, write_json
    from fbnas.latency.device import device_record
    from fbnas.latency.fidelity import calibrate_lut
    from fbnas.latency.lut import load_lut

    lut = load_lut(lut_path)
    if device_record(lut) is not None:
        raise FbnasError(f"{lut_path} was measured on a device by a bundle's run.py and is "
                         "calibrated on the bundle's networks there; fbnas calibrate would time "
                         "them on this machine instead. To recalibrate, re-run run.py on the "
                         "device (more --rounds) and import again with fbnas profile "
                         "--from-results")
    runtime = lut.check_runtime(runtime)
    if lut.calibration and not (force or dry_run):
        raise FbnasError(f"{lut_path} already has a calibration; pass --force to replace it "
                         "or --dry-run to only report")
    if fit >= networks:
        raise FbnasError(f"--fit ({fit}) must be smaller than --networks ({networks})")
    if not dry_run:
        check_writable(lut_path, "LUT (or --dry-run)")
    report = calibrate_lut(lut, networks=networks, fit=fit, seed=seed, rounds=rounds,
                           block_time=block_time, runtime=runtime)
    click.echo(report.text())
    if not dry_run:
        lut.data["calibration"] = report.calibration()
        write_json(lut_path, lut.data)
        click.echo(f"stored the calibration in {lut_path}")


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
    from fbnas.arch.space import load_space
    from fbnas.latency.lut import load_lut
    from fbnas.latency.matching import warn_other_machine

    space = load_space(space_name) if space_name else None
    lut = load_lut(lut_path, space)
    warn_other_machine(lut)
    click.echo(lut.summary())


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


def run_config(config_path, out, resume, force, overrides, download, **keys):
    """Defaults < the resumed run's config < --config file < named options < --set."""
    from fbnas.config import load_config
    from fbnas.runs.rundir import resume_config

    if resume and force:
        raise UsageError("--resume continues a run and --force starts over; pick one")
    base = resume_config(out) if resume else None
    sets = [f"{k}={v}" for k, v in keys.items() if v is not None]
    if download:
        sets.append("data.download=true")
    cfg = load_config(config_path, sets + list(overrides), base=base)
    return cfg


def _leave_if_child() -> None:
    """End a torchrun child process here once its run has finished and said so.

    Its files are written and closed (checkpoints atomically, the log and TensorBoard
    flushed) and its process group left; what remains is the interpreter's teardown, in
    which threads torch's distributed runtime leaves behind can abort the process
    (SIGABRT, "terminate called without an active exception") and turn a finished run into
    a failure. The launching process skips that teardown for the same reason."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _finite_ms(ctx, param, value):
    """A latency budget must be a finite number (FloatRange lets inf through)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter("must be a finite number of milliseconds")
    return value


def launch_processes(ctx: click.Context, nproc: int, threads: int | None) -> int:
    """Re-run this command, minus --nproc, as ``nproc`` torchrun processes on this machine."""
    from fbnas.runs.dist import launch

    if "WORLD_SIZE" in os.environ:
        raise UsageError("--nproc starts torchrun itself; inside torchrun leave it out")
    args = [ctx.info_name]
    for param in ctx.command.params:
        value = ctx.params[param.name]
        if param.name == "nproc" or value is None or value is False or value == ():
            continue
        flag = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            args.append(flag)
        elif getattr(param, "multiple", False):
            for v in value:
                args += [flag, str(v)]
        else:
            args += [flag, str(value)]
    return launch(nproc, args, threads)


@main.command(context_settings=CONTEXT)
@run_options
@click.option("--space", "space_name", help="Search space name or YAML file (config key space).")
@click.option("--lut", help="Lookup table JSON (config key lut).")
@click.option("--mode", type=click.Choice(["soft", "hard"]), help="Supernet forward mode.")
@click.option("--target-ms", type=click.FloatRange(min=0, min_open=True), metavar="MS",
              callback=_finite_ms, help="Latency budget: search for the most accurate network whose predicted "
              "latency is about MS and at most MS (loss.form=target, loss.target_ms=MS).")
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
    config file; --set overrides both.

    \b
    Examples:
      fbnas train --config tiny --out runs/tiny
      fbnas train --config fbnet_cifar --data-dir /data/cifar10 --out runs/c10
      fbnas train --config fbnet_cifar --target-ms 1.5 --out runs/c10_1.5ms
      fbnas train --out runs/c10 --resume
      fbnas train --config my_search.yaml --out runs/mine --nproc 2
    """
    from fbnas.runs.logs import console
    from fbnas.search.run import run_search

    if nproc is not None and nproc > 1:
        from fbnas.runs.rundir import check_run_dir

        # report a bad --out once, before starting processes
        check_run_dir(Path(out or "runs/search"), resume, force)
        code = launch_processes(ctx, nproc, threads)
        # torch's launcher can leave native threads behind whose teardown at interpreter exit
        # aborts this (parent) process after the run succeeded (SIGABRT, "terminate called
        # without an active exception"); it holds nothing else to tear down, so skip that
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    out = out or Path("runs/search")
    if target_ms is not None:
        overrides = ("loss.form=target", f"loss.target_ms={target_ms!r}", *overrides)
    cfg = run_config(config_path, out, resume, force, overrides, download,
                     **{"space": space_name, "lut": lut, "data.dir": data_dir,
                        "search.epochs": epochs, "search.mode": mode, "run.seed": seed,
                        "run.device": device, "run.threads": threads})
    with console():
        result = run_search(cfg, out, resume=resume, force=force)
    if not result["stopped"] and result["rank"] == 0:
        click.echo(f"done: {result['epochs_done']} epochs; the found architecture's predicted "
                   f"latency is {result['found_cost'] / 1000:.3f} ms"
                   if cfg.search.cost == "latency" else f"done: {result['epochs_done']} epochs")
        click.echo(f"next: fbnas sample {out} --hard")
    _leave_if_child()


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
    from fbnas.runs.logs import console
    from fbnas.runs.retrain import run_retrain

    out = out or Path("runs/retrain")
    if arch is None and not resume:
        raise UsageError("give ARCH, the architecture file written by fbnas sample")
    cfg = run_config(config_path, out, resume, force, overrides, download,
                     **{"retrain.arch": arch, "retrain.name": name, "data.dir": data_dir,
                        "retrain.epochs": epochs, "run.seed": seed, "run.device": device,
                        "run.threads": threads})
    with console():
        result = run_retrain(cfg, out, resume=resume, force=force)
    if not result["stopped"] and "test" in result and result["rank"] == 0:
        click.echo(f"done: {result['epochs_done']} epochs; test top1 "
                   f"{result['test']['top1']:.2f}%")


@main.command(context_settings=CONTEXT)
@click.argument("source", metavar="RUN_DIR_OR_CHECKPOINT", type=click.Path(path_type=Path))
@click.option("--hard", is_flag=True,
              help="Take each layer's most probable op (argmax theta) instead of drawing.")
@click.option("--target-ms", default=None, type=click.FloatRange(min=0, min_open=True),
              metavar="MS", callback=_finite_ms,
              help="With --hard: pick the most probable architecture under softmax(theta) "
                   "whose calibrated predicted latency is at most MS milliseconds (exact) "
                   "[default: the search's latency budget, loss.target_ms, if it had one].")
@click.option("--floor", default=None, type=click.FloatRange(min=0, max=1, max_open=True),
              metavar="SHARE",
              help="With a budget: the network must spend at least SHARE of it, where any "
                   "network of the space does (0: any network under it) [default: the "
                   "search's loss.target_floor].")
@click.option("--num", default=1, show_default=True, type=click.IntRange(min=1),
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
    from dataclasses import replace

    from fbnas.arch.definition import add_architectures
    from fbnas.config import Budget
    from fbnas.errors import UsageError
    from fbnas.io import check_writable
    from fbnas.latency.reports import format_entry, format_ranked
    from fbnas.search.checkpoint import load_search_checkpoint
    from fbnas.search.sampling import sample_architectures
    from fbnas.search.table import resolve_lut

    if hard and num > 1:
        raise UsageError("--num draws from softmax(theta); --hard gives one architecture")
    if target_ms is not None and not hard:
        raise UsageError("--target-ms picks the most probable architecture within a latency "
                         "budget; add --hard")
    ck = load_search_checkpoint(source)
    out = out or ck.run_dir / "arch.json"
    check_writable(out)
    lut = resolve_lut(ck, lut_path)
    budget = None
    if target_ms is not None:
        budget = Budget(target_ms, ck.floor if floor is None else floor)
    elif hard and ck.budget is not None:
        budget = ck.budget if floor is None else replace(ck.budget, floor=floor)
        click.echo(f"within the search's latency budget of {budget.ms:g} ms (loss.target_ms); "
                   "--target-ms sets another")
    if floor is not None and budget is None:
        raise UsageError("--floor is a share of a latency budget; give --target-ms, or sample "
                         "a search that had one")
    entries = sample_architectures(ck, lut, hard, num=num, seed=seed, name=name, budget=budget)
    add_architectures(out, entries, force=force)
    if len(entries) == 1:
        click.echo(format_entry(entries[0], lut))
    else:
        click.echo(format_ranked(entries, num, seed))
    what = entries[0]["name"] if len(entries) == 1 else f"{len(entries)} architectures"
    click.echo(f"wrote {what} to {out}")


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
@click.option("--block-time", default=DEFAULT_BLOCK_TIME, show_default=True,
              type=click.FloatRange(min=0.0001, max=10.0), callback=_finite,
              help="Seconds per timed block of calls.")
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
    from fbnas.arch.definition import select
    from fbnas.latency.measure import latency_report
    from fbnas.search.table import recorded_lut

    name, defn = select(arch_path, name)
    lut = recorded_lut(defn, lut_path, arch_path=arch_path)
    if lut is not None:
        from fbnas.latency.device import not_here, prediction_report

        # a table measured on another device by a bundle's run.py: predict, do not time here
        reason = not_here(lut)
        if reason is not None:
            click.echo(prediction_report(defn, lut, reason, batch=batch, runtime=runtime))
            return
    click.echo(latency_report(defn, lut, threads=threads, batch=batch, rounds=rounds,
                              block_time=block_time, seed=seed, runtime=runtime))


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
    from fbnas.data.folders import link_subset, pick_classes
    from fbnas.io import atomic_write, refuse_overwrite

    refuse_overwrite(out, force)
    if link is not None and link.exists():
        raise UsageError(f"{link} already exists; name a new folder for --link")
    names = pick_classes(root, num, seed)
    header = f"# {num} classes of {root} drawn with seed {seed} (fbnas classes)\n"
    atomic_write(out, lambda p: p.write_text(header + "".join(f"{n}\n" for n in names)))
    click.echo(f"wrote {out}: {num} classes of {root}, seed {seed}")
    if link is not None:
        made = link_subset(root, names, link)
        click.echo(f"linked {made} class folders into {link}; train on it with data.dir: {link}")


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
    from fbnas.arch.definition import select
    from fbnas.latency.reports import format_summary
    from fbnas.search.table import recorded_lut

    _, defn = select(arch_path, name)
    click.echo(format_summary(defn, recorded_lut(defn, lut_path, arch_path=arch_path)))


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
@click.option("--calibration-images", default=256, show_default=True,
              type=click.IntRange(min=1),
              help="With --precision int8: random training images to calibrate on.")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Output file (.pt2 for --format pt2).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of --random-weights and of the calibration images' draw.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.pass_context
def export(ctx, arch_path, name, weights, random_weights, fmt, precision, data_dir,
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
    import torch

    from fbnas.arch.definition import build_model
    from fbnas.arch.export import export_model, require_onnx
    from fbnas.errors import UsageError
    from fbnas.io import check_writable
    from fbnas.runs.checkpoint import load_weights

    if (weights is None) == (not random_weights):
        raise UsageError("pass --weights CKPT, or --random-weights to export an untrained "
                         "network")
    if precision == "int8":
        if fmt != "onnx":
            raise UsageError("--precision int8 quantizes the ONNX export; use --format onnx")
        if data_dir is None:
            raise UsageError("--precision int8 calibrates on real images; give --data-dir DIR, "
                             "the CIFAR-10 folder the network was trained on")
    else:
        for option in ("data_dir", "calibration_images"):
            if ctx.get_parameter_source(option) == click.core.ParameterSource.COMMANDLINE:
                raise UsageError(f"--{option.replace('_', '-')} calibrates int8 quantization; "
                                 "add --precision int8 or drop it")
    if fmt == "onnx":
        require_onnx()
    check_writable(out)
    if precision == "int8":
        from fbnas.io import refuse_overwrite

        refuse_overwrite(out, force)  # before reading data and quantizing, not after
    torch.manual_seed(seed)
    model = build_model(arch_path, name)
    what = load_weights(model, weights) if weights else f"random weights (seed {seed})"
    if precision == "int8":
        _export_int8(model, what, out, data_dir, calibration_images, seed,
                     evaluate=weights is not None)
        return
    diff = export_model(model, fmt, out, force=force)
    click.echo(f"exported {model.definition['name']} with {what}")
    shape = "x".join(map(str, model.input_shape(1)[1:]))
    click.echo(f"input: float32 N x {shape} (N dynamic), output: N x "
               f"{model.definition['head']['classes']} logits")
    if diff is not None:
        click.echo(f"checked: the saved program matches eager within {diff:.1e} (max abs)")
    click.echo(f"wrote {out}")


#: training images per calibration batch of export --precision int8 (MinMax ranges do not
#: depend on how the images are batched)
INT8_CALIBRATION_BATCH = 32
#: int8 top-1 this many points below fp32 gets a warning
INT8_DROP_WARNING = 2.0


def _export_int8(model, what: str, out: Path, data_dir: str, n_images: int, seed: int,
                 evaluate: bool) -> None:
    """export --precision int8: export to ONNX, quantize on ``n_images`` training images of
    the CIFAR-10 folder ``data_dir`` (normalised as training normalises them), write ``out``;
    with ``evaluate`` print fp32 and int8 top-1 on the folder's test set."""
    import json

    import torch

    from fbnas.arch.export import EXAMPLE_BATCH, onnx_program
    from fbnas.arch.quantize import quantize_int8, top1
    from fbnas.data.batches import normalize
    from fbnas.data.cifar import CIFAR_FOLDER, CIFAR_TRAIN_FILES
    from fbnas.data.memory import load_dataset
    from fbnas.errors import warn_stderr
    from fbnas.io import atomic_write

    defn = model.definition
    folder = Path(data_dir)
    if not (folder / CIFAR_FOLDER).is_dir() and not (folder / CIFAR_TRAIN_FILES[0]).is_file():
        raise FbnasError(f"--data-dir {folder} holds no CIFAR-10 data: give the folder with "
                         f"{CIFAR_FOLDER}/ (python format) the network was trained on")
    data = load_dataset(folder, "cifar10", resolution=defn["input"]["resolution"])
    channels, classes = defn["input"]["channels"], defn["head"]["classes"]
    if data.train_images.shape[1] != channels or len(data.classes) != classes:
        raise FbnasError(f"the images of {folder} ({data.train_images.shape[1]} channels, "
                         f"{len(data.classes)} classes) do not fit {defn['name']} ({channels} "
                         f"channels, {classes} classes); give the data it was trained on")
    available = len(data.train_images)
    if n_images > available:
        raise UsageError(f"--calibration-images {n_images} is more than the {available} "
                         f"training images in {folder}; give at most {available}")
    pick = torch.randperm(available, generator=torch.Generator().manual_seed(seed))[:n_images]
    # training normalises with the data set's mean and std (fbnas.data.batches.BatchLoader)
    images = normalize(data.train_images[pick], data.mean, data.std).numpy()
    batches = [images[i:i + INT8_CALIBRATION_BATCH]
               for i in range(0, n_images, INT8_CALIBRATION_BATCH)]
    # the ONNX export of export --format onnx, as bytes: the program and its metadata
    program = onnx_program(model, torch.randn(model.input_shape(EXAMPLE_BATCH)), "logits")
    program.model.metadata_props["fbnas.definition"] = json.dumps(defn)
    fp32 = program.model_proto.SerializeToString()
    int8 = quantize_int8(fp32, batches)
    atomic_write(out, lambda p: p.write_bytes(int8))
    click.echo(f"exported {defn['name']} with {what}")
    click.echo(f"quantized to int8 (ONNX Runtime static, QDQ, per-channel int8 weights, uint8 "
               f"activations) on {n_images} training images of {folder} (seed {seed})")
    shape = "x".join(map(str, model.input_shape(1)[1:]))
    click.echo(f"input: float32 N x {shape} (N dynamic), output: N x {classes} logits")
    if not evaluate:
        click.echo("no accuracy report for random weights; give --weights (a fbnas retrain "
                   "checkpoint) to compare int8 with fp32 on the test set")
    elif not data.has_test:
        click.echo(f"no accuracy report: {folder} has no test split")
    else:
        test = normalize(data.test_images, data.mean, data.std).numpy()
        labels = data.test_labels.numpy()
        acc32, pred32 = top1(fp32, test, labels)
        acc8, pred8 = top1(int8, test, labels)
        click.echo(f"top-1 fp32 {acc32:.2f}% int8 {acc8:.2f}% ({len(labels)} test images)")
        click.echo(f"int8 predicts the class fp32 predicts for "
                   f"{100.0 * (pred32 == pred8).mean():.2f}% of them")
        if acc32 - acc8 > INT8_DROP_WARNING:
            warn_stderr(f"int8 top-1 is {acc32 - acc8:.2f} points below fp32; calibrate on "
                        "more images (--calibration-images) or deploy the fp32 export")
    click.echo(f"wrote {out}")


if __name__ == "__main__":
    main()
