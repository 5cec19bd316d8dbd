"""Shared by tests in several folders (moved out of tests/advisor/launch/test_launchers.py, issue 44)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

SLURM_TOOLS = ("slurmctld", "sbatch", "munged")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def slurm(tmp_path):
    """A local slurmctld (no slurmd: CLOUD nodes, which `sbatch --test-only` schedules against) with three
    partitions: `fits` (the plan's node count, each with the GPUs, vCPUs and RAM the script asks for), `small`
    (RAM one GiB short) and `one` (a single node). Yields a function running `sbatch --test-only`."""
    missing = [t for t in SLURM_TOOLS if shutil.which(t) is None]
    if missing or not Path("/etc/munge/munge.key").exists():
        pytest.skip(f"Slurm controller not installed ({', '.join(missing) or 'munge key'}; .ci/run installs it)")
    root = tmp_path / "slurm"
    for sub in ("state", "run", "log"):
        (root / sub).mkdir(parents=True)
    key = root / "run" / "munge.key"
    shutil.copy("/etc/munge/munge.key", key)
    key.chmod(0o600)
    sock = root / "run" / "munge.socket"
    subprocess.run(["munged", "-f", f"--socket={sock}", f"--pid-file={root}/run/munged.pid",
                    f"--log-file={root}/log/munged.log", f"--key-file={key}", f"--seed-file={root}/run/munge.seed"],
                   check=True, capture_output=True, timeout=30)
    pids = [root / "run" / "munged.pid", root / "run" / "slurmctld.pid"]
    conf = root / "slurm.conf"

    def write_conf(nodes: int, gpus: int, cpus: int, mem_mib: int, max_minutes: int | None = None) -> None:
        """... and with `max_minutes`, partitions `capped` (MaxTime that many minutes) and `below` (a minute less)
        on the `fits` nodes, under EnforcePartLimits=ALL, so a script asking for more time than a partition allows
        is refused."""
        lines = ["ClusterName=advisor", f"SlurmctldHost={socket.gethostname()}", f"SlurmctldPort={_free_port()}",
                 f"SlurmdPort={_free_port()}", "SlurmUser=root", "AuthType=auth/munge", f"AuthInfo=socket={sock}",
                 f"StateSaveLocation={root}/state", f"SlurmctldPidFile={pids[1]}",
                 f"SlurmctldLogFile={root}/log/slurmctld.log", "ProctrackType=proctrack/linuxproc",
                 "TaskPlugin=task/none", "MpiDefault=none", "SchedulerType=sched/backfill",
                 "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory", "GresTypes=gpu",
                 "ResumeProgram=/bin/true", "SuspendProgram=/bin/true", "SuspendTime=600", "ResumeTimeout=600",
                 "MailProg=/bin/true", "EnforcePartLimits=ALL"]
        for name, count, mem in (("fit", nodes, mem_mib), ("small", nodes, mem_mib - 1024), ("one", 1, mem_mib)):
            lines.append(f"NodeName={name}[1-{count}] NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem} "
                         f"Gres=gpu:{gpus} State=CLOUD")
            part = {"fit": "fits"}.get(name, name)
            lines.append(f"PartitionName={part} Nodes={name}[1-{count}] MaxTime=INFINITE State=UP")
        if max_minutes is not None:
            for part, limit in (("capped", max_minutes), ("below", max_minutes - 1)):
                lines.append(f"PartitionName={part} Nodes=fit[1-{nodes}] MaxTime={limit} State=UP")
        conf.write_text("\n".join(lines) + "\n")
        (root / "gres.conf").write_text(f"Name=gpu Count={gpus}\n")
        env = {**os.environ, "SLURM_CONF": str(conf)}
        subprocess.run(["slurmctld", "-c", "-i", "-f", str(conf)], env=env, check=True, capture_output=True,
                       timeout=60)
        for _ in range(100):  # count of polls, not a time budget: the controller answers once it is up
            if subprocess.run(["sinfo"], env=env, capture_output=True, timeout=30).returncode == 0:
                return
            time.sleep(0.1)
        pytest.fail("slurmctld did not answer: " + (root / "log" / "slurmctld.log").read_text()[-2000:])

    def test_only(script: Path, partition: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "SLURM_CONF": str(conf)}
        return subprocess.run(["sbatch", "--test-only", "-p", partition, script.name], cwd=script.parent, env=env,
                              capture_output=True, text=True, timeout=60)

    yield write_conf, test_only
    for pid_file in reversed(pids):
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
