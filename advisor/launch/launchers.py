"""The bundle's ways onto a cluster besides SkyPilot's sky.yaml: a Slurm batch script and a dstack task (with a
fleet for multi-node), and the tiny model `launch.sh --smoke` trains. Each is a pure function of the candidate and
its model; bundle.py writes them.

What each file asks for comes from the plan: nodes and GPUs per node from the candidate, host RAM and vCPUs per
node from the planner's host check (advisor/planner/host.py: the 16-bit checkpoint once or one shard per process,
the offloaded states, PROCESS_RAM_GB per process; VCPUS_PER_GPU per GPU), the time limit from the plan's wall
hours with TIME_MARGIN, dstack's max_price from the offer's price. Checked by the tools themselves:
tests/advisor/launch/test_launchers.py runs `sbatch --test-only` against a local slurmctld and loads dstack.yml with dstack's own
loader (dstack 0.22.5).
"""

from __future__ import annotations

import math

from advisor.estimate.engine import Engine
from advisor.explain import launch_figures
from advisor.launch.caveats import distributed_type
from advisor.model.catalog import to_hf_config
from advisor.model.spec import ModelSpec, VisionSpec
from advisor.planner import host
from advisor.results import Candidate
from advisor.text import plain
from pricing import providers

# Slurm --time / dstack max_duration: the plan's wall hours (the p90 of the time model's band where there is one)
# times 1.25, plus 30 minutes for the job's start (an assumption: enough that a run at the band's slow end still
# finishes, without asking a scheduler for days it will not need).
TIME_MARGIN = 1.25
TIME_START_HOURS = 0.5
MAIN_PORT = 29500
# Price-sheet providers -> dstack backend names (pricing/data/providers.csv `dstack`: dstack 0.22.5
# dstack/_internal/core/models/backends/base.py BackendType); a provider without one gets no `backends` pin and
# dstack searches every configured backend.
DSTACK_NAMES = {s: p.dstack for p in providers.providers().values() for s in p.aliases if p.dstack}
DSTACK_BACKENDS = providers.dstack_backends()
# The tiny model of `launch.sh --smoke`: the candidate's model family at these sizes (random weights on the CPU).
SMOKE_SIZES = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256}
SMOKE_EOS_ID = 256
SMOKE_VISION = VisionSpec(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                          image_size=64, patch_size=16, mm_tokens_per_image=4)


def host_needs(c: Candidate, model: ModelSpec) -> tuple[int | None, int]:
    """(host RAM bytes per node or None when the model's size is unknown, vCPUs per node): the planner's host
    check for this candidate (advisor/planner/host.py)."""
    per_node = c.offer.gpu_count
    cpus = host.vcpus_needed(per_node)
    if model.hidden_size <= 1:  # cli/launch.py's stand-in spec for a plan whose model could not be loaded
        return None, cpus
    try:
        engine = Engine(model)
        weights16 = engine.counts(c.stack).params_total * 2
        offload = engine.memory(c.stack, c.shape).cpu_ram_bytes // c.nodes if c.stack.offload != "none" else 0
    except Exception:  # noqa: BLE001 - a plan whose model could not be loaded carries a placeholder spec
        return None, cpus
    return math.ceil(host.ram_needed_bytes(weights16, per_node, c.stack.sharding, offload)), cpus


def time_limit_hours(c: Candidate) -> float:
    t = c.timing
    slow = max(t.hours, t.hours_high or 0.0, t.hours_at_risk or 0.0)
    return slow * TIME_MARGIN + TIME_START_HOURS


def slurm_time(hours: float) -> str:
    """Slurm's days-hours:minutes:seconds, rounded up to the minute."""
    minutes = max(1, math.ceil(hours * 60))
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def slurm_script(c: Candidate, model: ModelSpec, job: str, approved_hours: float | None = None) -> str:
    """slurm.sbatch: one task per node, each running launch.sh (accelerate launch), which reads its node rank from
    SLURM_NODEID; the head node's address is the allocation's first host (scontrol show hostnames). Under an
    approval (`approved_hours`: its hours cap) --time is the cap itself."""
    ram, cpus = host_needs(c, model)
    gpus = c.offer.gpu_count
    mem = f"{math.ceil(ram / 2**30)}G" if ram else "0"
    limit = approved_hours or time_limit_hours(c)
    t = c.timing
    lines = [
        "#!/bin/bash",
        f"# Slurm batch script written by gpu-advisor for {plain(model.name)}: {c.nodes} node(s) x {gpus} "
        f"{plain(c.offer.gpu_model)}, {distributed_type(c)}.",
        f"# Estimate: {plain(launch_figures.estimate_line(c))} at the plan's cloud price.",
        f"# {c.fit.peak_bytes / 1e9:.1f} GB peak per GPU, {t.tokens_per_sec:,.0f} tokens/s; p50 {t.hours:.2f} h wall "
        f"({t.train_hours:.2f} h training).",
        f"# Stack: {plain(c.label or c.stack.label())}",
        f"# --mem and --cpus-per-task: gpu-advisor's host check (model loading, offloaded states, "
        f"{host.PROCESS_RAM_GB:g} GB and {host.VCPUS_PER_GPU} vCPUs per GPU process)"
        + ("" if ram else "; the model's size is unknown here, so --mem=0 asks for all of each node's memory") + ".",
        (f"# --time: the approved cap's {approved_hours:.2f} h (budget_cap.json; train.py stops before it)."
         if approved_hours else
         f"# --time: the plan's {max(t.hours, t.hours_high or 0.0):.2f} h x {TIME_MARGIN:g} + {TIME_START_HOURS:g} h."),
        "# Submit from this folder: sbatch slurm.sbatch   (check first: sbatch --test-only slurm.sbatch)",
        "# Continue after a time limit or a failure from the newest checkpoint: sbatch slurm.sbatch --resume",
        "# Your cluster may also need --partition and --account (add #SBATCH lines below).",
        f"#SBATCH --job-name={job}",
        f"#SBATCH --nodes={c.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus}",
        f"#SBATCH --cpus-per-task={cpus}",
        f"#SBATCH --mem={mem}",
        f"#SBATCH --time={slurm_time(limit)}",
        "#SBATCH --output=slurm-%j.out",
        "set -euo pipefail",
        'cd "${SLURM_SUBMIT_DIR:-.}"',
    ]
    if c.nodes > 1:
        lines += [
            "# Rendezvous: the first host of the allocation; launch.sh takes the node rank from SLURM_NODEID.",
            'MAIN_PROCESS_IP="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
            f'MAIN_PROCESS_PORT="${{MAIN_PROCESS_PORT:-{MAIN_PORT}}}"',
            "export MAIN_PROCESS_IP MAIN_PROCESS_PORT",
        ]
    lines.append('srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash launch.sh "$@"')
    return "\n".join(lines) + "\n"


def dstack_backend(provider: str) -> str | None:
    return providers.dstack_backend(provider)


def _dstack_common(c: Candidate, model: ModelSpec) -> dict:
    ram, cpus = host_needs(c, model)
    resources: dict = {"gpu": f"{c.offer.gpu_model}:{math.floor(c.fit.usable_bytes / 2**30)}GB..:{c.offer.gpu_count}",
                       "cpu": f"{cpus}..", "shm_size": "16GB"}
    if ram:
        resources["memory"] = f"{math.ceil(ram / 2**30)}GB.."
    out: dict = {"resources": resources, "spot_policy": "spot" if c.cost.spot else "on-demand"}
    price = c.offer.spot_price_hour if c.cost.spot else c.offer.price_hour
    if price:
        out["max_price"] = round(float(price), 4)  # USD per instance-hour, the offer the plan priced
    backend = dstack_backend(c.offer.provider)
    if backend:
        out.update(backends=[backend], regions=[c.offer.region], instance_types=[c.offer.instance_type])
    return out


def dstack_task(c: Candidate, model: ModelSpec, name: str, setup: list[str],
                approved_hours: float | None = None) -> dict:
    """dstack.yml: a task on `nodes` nodes running launch.sh, which reads DSTACK_NODE_RANK and
    DSTACK_MASTER_NODE_IP (set by dstack's runner on every node); max_duration is the approval's hours cap where
    there is one."""
    task: dict = {"type": "task", "name": name, "nodes": c.nodes, "python": "3.12",
                  "env": ["HF_TOKEN"], "commands": [*setup, "bash launch.sh"], **_dstack_common(c, model),
                  "max_duration": f"{math.ceil((approved_hours or time_limit_hours(c)) * 60)}m"}
    if c.nodes > 1:
        task["fleets"] = [f"{name}-fleet"]
    return task


def dstack_fleet(c: Candidate, model: ModelSpec, name: str) -> dict:
    """fleet.dstack.yml for a multi-node task: `placement: cluster` puts the nodes in one backend and region on
    its fast interconnect (dstack docs, concepts/fleets.md 'Placement')."""
    common = _dstack_common(c, model)
    common.pop("max_duration", None)
    return {"type": "fleet", "name": f"{name}-fleet", "nodes": c.nodes, "placement": "cluster", **common}


def smoke_config(model: ModelSpec) -> dict:
    """config.json of the candidate's model family at SMOKE_SIZES (and a 4-expert MoE / one-layer vision tower
    where the family has them): what `launch.sh --smoke` random-initialises on the CPU."""
    tiny = dict(SMOKE_SIZES)
    if model.num_experts:
        tiny.update(num_experts=min(model.num_experts, 4), num_experts_per_tok=min(max(model.num_experts_per_tok, 1), 2),
                    moe_intermediate_size=32, mlp_only_layers=[])
        if model.shared_expert_intermediate_size:
            tiny["shared_expert_intermediate_size"] = 32
    if model.sliding_window is not None:
        tiny["sliding_window"] = 64
    if model.vision is not None or model.family == "gemma3":
        tiny["vision"] = SMOKE_VISION
    config = to_hf_config(model.model_copy(update=tiny))
    # the byte-level tokenizer's <|endoftext|> (train.py BYTE_SPECIALS): a family's own ids (Phi-3's 32000) would lie
    # outside the toy vocabulary
    config.get("text_config", config).update(bos_token_id=SMOKE_EOS_ID, eos_token_id=SMOKE_EOS_ID,
                                             pad_token_id=SMOKE_EOS_ID)
    return config
