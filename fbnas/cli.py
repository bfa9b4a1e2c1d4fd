"""The fbnas command line: parse, call a library function, map errors to exit codes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

import fbnas
from fbnas.errors import FbnasError, UsageError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Group(click.Group):
    """Turns FbnasError into a one-line message and exit code, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except FbnasError as e:
            from fbnas.dist import env_rank

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


@click.group(cls=Group, context_settings=CONTEXT)
@click.version_option(fbnas.__version__, "--version", prog_name="fbnas")
def main() -> None:
    """FBNet-style hardware-aware differentiable neural architecture search.

    \b
    The usual chain:
      fbnas profile --space fbnet_cifar --out lookup_tables/mine.json
      fbnas train --config configs/fbnet_cifar.yaml --out runs/search
      fbnas sample runs/search --hard --out arch.json
    """


@main.command(context_settings=CONTEXT)
@click.option("--space", "space_name", required=True,
              help="Bundled space name (fbnet_cifar, fbnet_imagenet, tiny) or a space YAML file.")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the lookup table (JSON).")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1),
              help="torch intra-op threads used while timing (recorded in the table).")
@click.option("--batch", default=1, show_default=True, type=click.IntRange(min=1),
              help="Batch size of the timed inputs.")
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(min=1),
              help="Interleaved timing rounds per entry.")
@click.option("--min-time", default=0.05, show_default=True, type=click.FloatRange(min=0.001),
              help="Seconds of timing per entry and round.")
@click.option("--check", "check_n", default=0, show_default=True, type=click.IntRange(min=0),
              help="After profiling, calibrate and check on N random networks (see calibrate).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--force", is_flag=True, help="Overwrite an existing table.")
def profile(space_name, out, threads, batch, rounds, min_time, check_n, seed, force):
    """Time every candidate op at every searchable layer into a latency lookup table.

    \b
    Example:
      fbnas profile --space fbnet_cifar --out lookup_tables/fbnet_cifar.json --threads 1
    """
    from fbnas.io import refuse_overwrite
    from fbnas.lut import LUT, profile_space, save_lut
    from fbnas.space import load_space

    space = load_space(space_name)
    refuse_overwrite(out, force)
    data = profile_space(space, threads=threads, batch=batch, rounds=rounds,
                         min_run_time=min_time, seed=seed, source=str(space_name))
    if check_n:
        from fbnas.fidelity import calibrate_lut
        report = calibrate_lut(LUT(data), networks=check_n, seed=seed)
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
@click.option("--min-time", default=0.2, show_default=True, type=click.FloatRange(min=0.001),
              help="Seconds of timing per network and pass.")
@click.option("--dry-run", is_flag=True, help="Report only; leave the table unchanged.")
@click.option("--force", is_flag=True, help="Replace an existing calibration.")
def calibrate(lut_path, networks, fit, seed, min_time, dry_run, force):
    """Measure random whole networks, report the table's fidelity, store a calibration.

    Networks are timed twice with the profile's protocol, interleaved with re-timed table
    entries. Prints signed bias, MAPE, share within +-10% and Kendall tau for the raw table,
    the calibrated table (a * sum + b, fitted on --fit networks, scored on the rest) and FLOPs,
    next to the noise floor (the two timings of the same networks).

    \b
    Example:
      fbnas calibrate lookup_tables/fbnet_cifar.json --networks 50 --fit 20
    """
    from fbnas.fidelity import calibrate_lut
    from fbnas.io import write_json
    from fbnas.lut import load_lut

    lut = load_lut(lut_path)
    if lut.calibration and not (force or dry_run):
        raise FbnasError(f"{lut_path} already has a calibration; pass --force to replace it "
                         "or --dry-run to only report")
    if fit >= networks:
        raise FbnasError(f"--fit ({fit}) must be smaller than --networks ({networks})")
    report = calibrate_lut(lut, networks=networks, fit=fit, seed=seed, min_run_time=min_time)
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
      fbnas show-lut lookup_tables/fbnet_cifar.json --space fbnet_cifar
    """
    from fbnas.lut import load_lut
    from fbnas.space import load_space

    space = load_space(space_name) if space_name else None
    click.echo(load_lut(lut_path, space).summary())


@main.command(context_settings=CONTEXT)
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="YAML config (configs/fbnet_cifar.yaml, configs/tiny.yaml, or your own).")
@click.option("--space", "space_name", help="Search space name or YAML file (config key space).")
@click.option("--lut", help="Lookup table JSON (config key lut).")
@click.option("--data-dir", help="Folder with cifar-10-batches-py/ or an image folder (data.dir).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/search"),
              show_default=True, help="Run directory: config, log, TensorBoard, checkpoints.")
@click.option("--epochs", type=click.IntRange(min=1), help="Total epochs (search.epochs).")
@click.option("--mode", type=click.Choice(["soft", "hard"]), help="Supernet forward mode.")
@click.option("--seed", type=int, help="Seed for splits, init, data order and Gumbel noise.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), help="Where to train.")
@click.option("--threads", type=click.IntRange(min=1), help="torch intra-op threads (per process).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override any config key, e.g. --set optim.weights.lr=0.05 (repeatable).")
@click.option("--download", is_flag=True, help="Download CIFAR-10 into --data-dir if missing.")
@click.option("--resume", is_flag=True, help="Continue the run in --out where it stopped.")
@click.option("--force", is_flag=True, help="Start over in a non-empty --out.")
@click.option("--nproc", type=click.IntRange(min=1), default=None,
              help="Search with N data-parallel processes on this machine (launches torchrun; "
                   "data.batch_size is per process).")
@click.pass_context
def train(ctx, config_path, space_name, lut, data_dir, out, epochs, mode, seed, device, threads,
          overrides, download, resume, force, nproc):
    """Search: train the Gumbel-softmax supernet with alternating weight/theta optimizers.

    Loss: CE * alpha * (log LAT)^beta with LAT the expected latency in microseconds (or
    loss.form=target with loss.target_ms). Options given here override the config file;
    --set overrides both.

    Distributed: --nproc N runs N processes here; for several machines start
    `torchrun --nnodes M --nproc_per_node N ... -m fbnas train ...` on each. Every process
    trains on its own data.batch_size images per step (N x batch_size in all).

    \b
    Examples:
      fbnas train --config configs/tiny.yaml --out runs/tiny
      fbnas train --config configs/fbnet_cifar.yaml --data-dir data/cifar10 --out runs/c10
      fbnas train --out runs/c10 --resume
      fbnas train --config configs/fbnet_cifar.yaml --out runs/c10 --nproc 4
      torchrun --nproc_per_node 4 -m fbnas train --config configs/fbnet_cifar.yaml --out runs/c10
    """
    from fbnas.config import load_config
    from fbnas.search import resume_config, run_search

    if resume and force:
        raise UsageError("--resume continues a run and --force starts over; pick one")
    base = resume_config(out) if resume else None
    sets = list(overrides)
    for key, value in (("space", space_name), ("lut", lut), ("data.dir", data_dir),
                       ("search.epochs", epochs), ("search.mode", mode), ("run.seed", seed),
                       ("run.device", device), ("run.threads", threads)):
        if value is not None:
            sets.insert(0, f"{key}={value}")
    if download:
        sets.insert(0, "data.download=true")
    cfg = load_config(config_path, sets, base=base)
    if nproc is not None and nproc > 1:
        _launch_train(ctx, nproc, cfg, resume, force, out)
        return
    result = run_search(cfg, out, resume=resume, force=force, echo=click.echo)
    if result["main"] and not result["stopped"]:
        click.echo(f"done: {result['epochs_done']} epochs; argmax architecture costs "
                   f"{result['argmax_cost'] / 1000:.3f} ms" if cfg.search.cost == "latency" else
                   f"done: {result['epochs_done']} epochs")
        click.echo(f"next: fbnas sample {out} --hard")


def _launch_train(ctx: click.Context, nproc: int, cfg, resume: bool, force: bool,
                  out: Path) -> None:
    """Re-run this command (minus --nproc) in nproc torchrun processes on this machine."""
    from fbnas.dist import launch
    from fbnas.search import check_run_dir

    if "WORLD_SIZE" in os.environ:
        raise UsageError("--nproc starts torchrun itself; inside torchrun leave it out")
    check_run_dir(out, resume, force)  # report a bad --out once, before starting processes
    args = ["train"]
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
    sys.exit(launch(nproc, args, cfg.run.threads))


if __name__ == "__main__":
    main()
