"""`gpu-advisor launch`: write the runnable bundle (accelerate config, training args, script) for a plan candidate."""

from __future__ import annotations

import os
import shlex
import warnings
from pathlib import Path

import click

from advisor import approval as approvals
from advisor.errors import BadInput
from advisor.launch import caps
from advisor.launch.bundle import build_bundle, write_bundle
from advisor.launch.caveats import sky_caveat
from advisor.launch.plan_checks import check_launchable
from advisor.model.catalog import load_model
from advisor.model.spec import ModelSpec
from advisor.text import plain
from cli.plan import build_plan, plan_options
from cli.report import load_plan, plan_data


@click.command()
@click.option("--from", "from_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Plan JSON written by `gpu-advisor plan --format json` (else: plan options, planned now).")
@click.option("--rank", type=int, default=1, show_default=True, help="Candidate rank in the plan (1 = best).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write the bundle into (must not exist or be empty).")
@click.option("--force", is_flag=True, help="Write into an existing non-empty folder (bundle files are replaced).")
@click.option("--dataset", default="data/train.jsonl", show_default=True,
              help="Training data path written into training_args.yaml (JSONL {'text': ...} or .txt).")
@click.option("--approval", "approval_file", type=click.Path(dir_okay=False, path_type=Path),
              help="approval.json from `gpu-advisor approve` for the --from plan: its caps go into every launcher.")
@plan_options
@click.pass_context
def launch(ctx: click.Context, from_file: Path | None, rank: int, out_dir: Path, force: bool, dataset: str,
           approval_file: Path | None, **plan_opts) -> None:
    """Write accelerate_config.yaml, training_args.yaml, train.py, launch.sh, sky.yaml and a README
    for candidate --rank of a saved plan (--from) or of a plan made now from the plan options."""
    if approval_file is not None and from_file is None:
        raise BadInput("--approval: give the approved plan with --from plan.json (an approval names one saved plan).")
    approval = approvals.load(approval_file) if approval_file is not None else None
    if approval is not None and ctx.get_parameter_source("rank") is not click.core.ParameterSource.COMMANDLINE:
        rank = approval.rank
    plan, where = load_or_build_plan(from_file, plan_opts)
    if ctx.get_parameter_source("dataset") is not click.core.ParameterSource.COMMANDLINE and \
            plan.workload.get("dataset"):  # the data the plan counted is the data the bundle trains on
        dataset = str(plan.workload["dataset"])
        click.echo(f"dataset: training_args.yaml reads {plain(dataset)} (the plan's dataset; --dataset to change)",
                   err=True)
    candidate = pick(plan, rank, where)
    if from_file is not None:  # a file's values reach launch scripts: finite, positive, consistent, fitting
        check_launchable(candidate, where)
    if approval is not None:
        approvals.check_against(approval, plan_data(from_file, "--from"), candidate)
    if out_dir.is_dir() and not force and _non_empty(out_dir):
        raise BadInput(f"--out: folder {plain(out_dir)} exists and is not empty; pass --force to overwrite its "
                       "bundle files.")
    files, caveats = bundle_files(plan, candidate, dataset, approval)
    for note in caveats:
        click.echo(f"warning: {note}", err=True)
    write_bundle(files, out_dir, force=force)
    click.echo(f"Wrote {len(files)} files to {plain(out_dir)}: {', '.join(sorted(files))}")

    sky_run = caps.sky_command() if approval else "sky launch sky.yaml"
    sky = "" if sky_caveat(candidate) else f"   (or: cd {_word(out_dir)} && {sky_run})"
    click.echo(f"Run: bash {_word(out_dir / 'launch.sh')}{sky}")


def pick(plan, rank: int, where: str = "plan"):
    """Candidate `rank` of the plan, or one line saying why there is none."""
    if not plan.candidates:
        raise BadInput(f"{where}: the plan has no candidates{': ' + plan.notice if plan.notice else ''}.")
    if not 1 <= rank <= len(plan.candidates):
        raise BadInput(f"--rank: must be between 1 and {len(plan.candidates)} for this plan (got {rank}).")
    return plan.candidates[rank - 1]


def bundle_files(plan, candidate, dataset: str, approval=None) -> tuple[dict[str, str], list[str]]:
    """The bundle's files (name -> text) for a candidate of the plan, and the caveats it warns about;
    shared with `gpu-advisor serve`'s /bundle.zip, so the zip holds what `launch` writes."""
    options = {**{k: v for k, v in plan.assumptions.items() if v is not None},
               **{k: v for k, v in plan.workload.items() if v is not None}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = build_bundle(candidate, model_spec(plan), dataset=dataset, options=options, approval=approval)
    return files, [str(w.message) for w in caught]


def _word(path: Path) -> str:
    """A path as one shell word to copy, on one terminal line."""
    return plain(shlex.quote(str(path)))


def _non_empty(folder: Path) -> bool:
    try:
        return any(folder.iterdir())
    except OSError:
        return False  # unreadable: write_bundle reports it in plain words


def load_or_build_plan(from_file: Path | None, plan_opts: dict):
    """The plan from --from (validated: cli.report.load_plan), or planned now from the plan options
    (same as `gpu-advisor plan`)."""
    if from_file is None:
        if not (plan_opts.get("model") or plan_opts.get("model_arg") or plan_opts.get("plan_file")):
            raise BadInput("--from: give a plan JSON (gpu-advisor plan --format json > plan.json) "
                           "or plan options (--model M --tokens N ...).")
        return build_plan(**plan_opts), "plan"  # a plan file's dataset / from_config keys as `plan -f` reads them

    return load_plan(from_file, "--from"), "--from"


def model_spec(plan):
    """The plan's model from the catalog; a minimal spec from the plan itself if that is unavailable."""
    try:
        return load_model(plan.model.name)
    except Exception as exc:  # noqa: BLE001 - offline / unknown name: the bundle needs only name + family
        # A shared plan may name any local file: its reason would quote that file's values, so say only that.
        local = os.path.exists(os.path.expanduser(plan.model.name))  # never raises (too long, NUL, ...)
        reason = "a local file that is not a usable config.json" if local else plain(exc)
        click.echo(f"warning: could not load model {plain(plan.model.name)!r} ({reason}); using the plan's "
                   "family only.", err=True)
    # Only name and family reach the bundle; the shape fields are placeholders.
    return ModelSpec(name=plan.model.name, family=plan.model.family, source=plan.model.source,
                     vocab_size=1, hidden_size=1, intermediate_size=1, num_hidden_layers=1,
                     num_attention_heads=1, num_key_value_heads=1, head_dim=1, max_position_embeddings=1)
