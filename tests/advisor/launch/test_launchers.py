"""A 2-node plan's bundle reaches the clusters users have, each file accepted by its own tool (issue 37):
sky.yaml by SkyPilot's loader (tests/advisor/launch/test_sky_yaml.py's offline child), slurm.sbatch by `sbatch --test-only` against
a local Slurm controller (Debian's slurmctld + munge, started here with a cluster shaped like the plan's machines;
.ci/run installs them), `bash -n` and shellcheck, and dstack.yml / fleet.dstack.yml by dstack's own CLI loader
(dstack 0.22.5 `load_apply_configuration`, the test extra)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import yaml

from advisor.launch.bundle import LaunchWarning, build_bundle, write_bundle
from advisor.launch.caveats import SKYPILOT_CLOUDS, sky_cloud
from advisor.launch.launchers import host_needs, slurm_time, time_limit_hours
from advisor.model.catalog import load_model
from advisor.planner import plan

MODEL = "meta-llama/Llama-3.1-70B"


@pytest.fixture(scope="module")
def two_node(tmp_path_factory):
    """The first 2-node candidate of a 70B full fine-tune plan on a SkyPilot cloud, and its bundle."""
    p = plan(MODEL, tokens=100e6, methods=("full",), max_nodes=2, top=40)
    c = next(c for c in p.candidates + p.others if c.nodes == 2 and sky_cloud(c.offer.provider) in SKYPILOT_CLOUDS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LaunchWarning)
        folder = write_bundle(build_bundle(c, load_model(MODEL)), tmp_path_factory.mktemp("two") / "bundle")
    return c, folder


def test_a_two_node_plan_writes_sky_slurm_and_dstack_files(two_node):
    c, folder = two_node
    names = {p.name for p in folder.iterdir()}
    assert {"sky.yaml", "slurm.sbatch", "dstack.yml", "fleet.dstack.yml", "launch.sh"} <= names
    script = (folder / "slurm.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and f"#SBATCH --gpus-per-node={c.offer.gpu_count}" in script
    assert f"{c.timing.tokens_per_sec:,.0f} tokens/s" in script  # the estimate in its header
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in script and "srun" in script
    ram, cpus = host_needs(c, load_model(MODEL))
    assert f"#SBATCH --mem={-(-ram // 2**30)}G" in script and f"#SBATCH --cpus-per-task={cpus}" in script
    assert f"#SBATCH --time={slurm_time(time_limit_hours(c))}" in script
    assert time_limit_hours(c) > max(c.timing.hours, c.timing.hours_high or 0)


# --------------------------------------------------------------------------- SkyPilot


@pytest.mark.skipif(importlib.util.find_spec("sky") is None, reason="skypilot not installed (test extra)")
def test_skypilot_loads_the_two_node_sky_yaml(two_node, tmp_path):
    from helpers.skypilot import load_with_skypilot, offers_sheet

    c, folder = two_node
    results, summary = load_with_skypilot([folder / "sky.yaml"], tmp_path / "home", offers_sheet(tmp_path / "o.csv"))
    (got,) = results.values()
    assert "error" not in got, got
    assert got["num_nodes"] == 2 and got["instance_type"] == c.offer.instance_type and not summary["network_attempts"]


# --------------------------------------------------------------------------- dstack


@pytest.mark.skipif(importlib.util.find_spec("dstack") is None, reason="dstack not installed (test extra)")
def test_dstack_loads_the_task_and_its_cluster_fleet(two_node, monkeypatch):
    from dstack._internal.cli.services.configurators import load_apply_configuration
    from dstack._internal.core.errors import ConfigurationError
    from dstack._internal.core.models.configurations import TaskConfiguration
    from dstack._internal.core.models.fleets import FleetConfiguration

    c, folder = two_node
    monkeypatch.chdir(folder)  # dstack reports the path relative to the working folder
    _, task = load_apply_configuration("dstack.yml")
    _, fleet = load_apply_configuration("fleet.dstack.yml")
    assert isinstance(task, TaskConfiguration) and isinstance(fleet, FleetConfiguration)
    assert task.nodes == 2 and task.commands[-1] == "bash launch.sh" and [f.name for f in task.fleets] == [fleet.name]
    assert fleet.placement.value == "cluster" and fleet.nodes.min == fleet.nodes.max == 2
    for conf in (task, fleet):
        gpu = conf.resources.gpu
        assert (gpu.count.min, gpu.count.max) == (c.offer.gpu_count, c.offer.gpu_count)
        assert gpu.name == [c.offer.gpu_model]
        assert conf.max_price == pytest.approx(c.offer.spot_price_hour if c.cost.spot else c.offer.price_hour)
    assert task.max_duration >= time_limit_hours(c) * 3600 - 60
    # the check can fail: a node count dstack does not accept
    bad = yaml.safe_load((folder / "dstack.yml").read_text())
    bad["nodes"] = "two"
    Path("bad.dstack.yml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigurationError):
        load_apply_configuration("bad.dstack.yml")


# --------------------------------------------------------------------------- Slurm


def test_slurm_controller_accepts_the_script_on_the_plans_machines_and_refuses_smaller_ones(two_node, slurm):
    c, folder = two_node
    write_conf, test_only = slurm
    script = folder / "slurm.sbatch"
    directives = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)$", script.read_text(), re.M))
    mem_mib = int(directives["mem"].rstrip("G")) * 1024
    write_conf(int(directives["nodes"]), int(directives["gpus-per-node"]), int(directives["cpus-per-task"]) * 2,
               mem_mib)
    ok = test_only(script, "fits")
    assert ok.returncode == 0 and "to start at" in ok.stderr, ok.stderr
    for partition in ("small", "one"):  # a node short of RAM, a cluster short of a node: refused
        refused = test_only(script, partition)
        assert refused.returncode != 0, (partition, refused.stderr)


def test_slurm_script_and_launch_sh_pass_bash_and_shellcheck(two_node):
    c, folder = two_node
    for name in ("slurm.sbatch", "launch.sh"):
        assert subprocess.run(["bash", "-n", str(folder / name)], capture_output=True).returncode == 0, name
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (.ci/run installs it)")
    run = subprocess.run(["shellcheck", "-S", "warning", "slurm.sbatch", "launch.sh"], cwd=folder,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:]


def test_slurm_node_rank_and_head_address_reach_accelerate(two_node, tmp_path):
    """Under srun, launch.sh takes the node rank from SLURM_NODEID and the head address slurm.sbatch exported."""
    c, folder = two_node
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "accelerate").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    (bin_dir / "accelerate").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "DSTACK_", "MACHINE_RANK", "SLURM_"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SLURM_NODEID="1", MAIN_PROCESS_IP="10.0.0.9", MAIN_PROCESS_PORT="29555")
    run = subprocess.run(["bash", str(folder / "launch.sh")], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    argv = run.stdout.split("\n")
    assert argv[argv.index("--machine_rank") + 1] == "1" and argv[argv.index("--main_process_ip") + 1] == "10.0.0.9"
    env.pop("SLURM_NODEID")
    env.pop("MAIN_PROCESS_IP")
    env.update(DSTACK_NODE_RANK="1", DSTACK_MASTER_NODE_IP="10.0.0.4")  # dstack's runner variables
    run = subprocess.run(["bash", str(folder / "launch.sh")], env=env, capture_output=True, text=True)
    argv = run.stdout.split("\n")
    assert argv[argv.index("--machine_rank") + 1] == "1" and argv[argv.index("--main_process_ip") + 1] == "10.0.0.4"
