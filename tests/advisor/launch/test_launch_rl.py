"""A DPO or GRPO candidate's launch bundle is a TRL run: trl_config.yaml loads with TRL's own config classes and
holds the estimate's settings, and train.py trains with trl.DPOTrainer / trl.GRPOTrainer as the README says."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import random
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import trl
import yaml
from helpers.launch_fixtures import candidate, spec, write_tiny_llama
from transformers import HfArgumentParser

from advisor.launch.bundle import LaunchWarning, build_bundle, write_bundle
from advisor.objective import Objective

WORDS = "the quick brown fox jumps over the lazy dog while a small cat sleeps in the warm sun".split()


def rl_candidate(objective: Objective, method: str = "lora", **kw):
    fields = dict(gpu_count=1, nodes=1, sharding="none", micro_batch=2, grad_accum=2, seq_len=64, method=method,
                  precision="bf16", lora_rank=8 if method != "full" else None, grad_checkpointing=False)
    fields.update(kw)
    c = candidate(**fields)
    return c.model_copy(update={"stack": c.stack.model_copy(update={"objective": objective})})


def files_of(c) -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LaunchWarning)
        return build_bundle(c, spec("llama"), dataset="data/train.jsonl")


def trl_config(files) -> dict:
    return yaml.safe_load(files["trl_config.yaml"])


def test_dpo_bundle_config_loads_with_trls_dpoconfig_and_holds_the_estimates_settings():
    c = rl_candidate(Objective(kind="dpo", beta=0.2), micro_batch=4, grad_accum=8, seq_len=2048)
    files = files_of(c)
    cfg = trl_config(files)
    args = trl.DPOConfig(**cfg, use_cpu=True)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.max_length) == (4, 8, 2048)
    assert args.beta == 0.2 and args.loss_type == ["sigmoid"] and not args.precompute_ref_log_probs
    assert args.model_init_kwargs["dtype"] == "bfloat16"  # not TRL's float32 default
    assert "max_prompt_length" not in cfg and "rpo_alpha" not in cfg  # TRL 1.16 refuses them
    shared = yaml.safe_load(files["training_args.yaml"])
    assert "training" not in shared and shared["objective"]["kind"] == "dpo" and shared["lora"]["r"] == 8
    assert "trl==1.16.0" in files["requirements.txt"] and "vllm" not in files["requirements.txt"]
    assert "DPOTrainer" in files["train.py"] and "rewards.py" not in files


def test_grpo_colocate_bundle_config_loads_with_trls_parser_and_holds_vllms_settings(tmp_path):
    o = Objective(kind="grpo", num_generations=16, max_completion_length=1024, prompt_length=256, vllm="colocate",
                  vllm_gpu_memory_utilization=0.35, vllm_sleep=True, beta=0.04)
    c = rl_candidate(o, micro_batch=8, grad_accum=4, seq_len=256 + 1024)
    files = files_of(c)
    path = tmp_path / "trl_config.yaml"
    path.write_text(files["trl_config.yaml"])
    (args,) = HfArgumentParser(trl.GRPOConfig).parse_yaml_file(str(path))
    assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_gpu_memory_utilization == 0.35
    assert args.vllm_enable_sleep_mode and args.vllm_max_model_length == 1280  # prompt + completion: the pool's size
    assert (args.num_generations, args.max_completion_length, args.beta) == (16, 1024, 0.04)
    assert args.per_device_train_batch_size == 8  # completions, as the estimate counted them
    assert "vllm==0.33.0" in files["requirements.txt"] and "rewards.py" in files
    assert "vllm-serve" not in files["launch.sh"]


def test_grpo_server_bundle_starts_the_server_on_its_own_gpus_and_trains_on_the_rest():
    o = Objective(kind="grpo", vllm="server", vllm_server_gpus=2, card_bytes=80 * 2**30)
    c = rl_candidate(o, gpu_count=8, sharding="fsdp", method="lora", seq_len=1024, micro_batch=4, grad_accum=2)
    files = files_of(c)
    assert "CUDA_VISIBLE_DEVICES=6,7 trl vllm-serve" in files["launch.sh"]
    assert "export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5" in files["launch.sh"]
    acc = yaml.safe_load(files["accelerate_config.yaml"])
    assert acc["num_processes"] == 6
    assert trl.GRPOConfig(**trl_config(files), use_cpu=True).vllm_mode == "server"


# --- the bundle trains, on the CPU, as its README says -------------------------------------------------------


def _run(bundle: Path, tmp_path: Path) -> str:
    accelerate = shutil.which("accelerate") or pytest.fail("accelerate CLI not on PATH (the ml extra installs it)")
    config = write_tiny_llama(tmp_path / "tiny")
    cmd = [accelerate, "launch", "--config_file", "accelerate_config.yaml", "train.py", "--config",
           "training_args.yaml", "--init_from_config", str(config), "--max_steps", "2", "--logging_steps", "1",
           "--output_dir", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": ""}
    proc = subprocess.run(cmd, cwd=bundle, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def _bundle(c, tmp_path: Path, rows: list[dict]) -> Path:
    out = write_bundle(files_of(c), tmp_path / "bundle")
    (out / "data").mkdir()
    (out / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


@pytest.mark.slow
def test_dpo_bundle_trains_two_steps_on_the_cpu(tmp_path):
    rng = random.Random(0)
    rows = [{"prompt": " ".join(rng.choice(WORDS) for _ in range(6)), "chosen": " " + " ".join(WORDS[:4]),
             "rejected": " " + " ".join(WORDS[4:7])} for _ in range(16)]
    out = _run(_bundle(rl_candidate(Objective(kind="dpo"), seq_len=128), tmp_path, rows), tmp_path)
    assert json.loads(out.strip().splitlines()[-1]) == {"objective": "dpo", "steps": 2}
    assert "step=2 loss=" in out


@pytest.mark.slow
def test_grpo_bundle_trains_two_steps_on_the_cpu_generating_with_transformers(tmp_path):
    rng = random.Random(0)
    rows = [{"prompt": " ".join(rng.choice(WORDS) for _ in range(5))} for _ in range(8)]
    o = Objective(kind="grpo", num_generations=2, max_completion_length=8, prompt_length=40, vllm="colocate")
    c = rl_candidate(o, method="full", micro_batch=2, grad_accum=1, seq_len=48)
    out = _run(_bundle(c, tmp_path, rows), tmp_path)  # --init_from_config: vLLM off, transformers generate
    assert json.loads(out.strip().splitlines()[-1]) == {"objective": "grpo", "steps": 2}


def _benchmark(bundle: Path, tmp_path: Path, steps: int = 2) -> dict:
    """`train.py --benchmark` as launch.sh runs it (accelerate, the bundle's config) on the CPU, tiny random model."""
    accelerate = shutil.which("accelerate") or pytest.fail("accelerate CLI not on PATH (the ml extra installs it)")
    config = write_tiny_llama(tmp_path / "tiny")
    out = tmp_path / "measured.json"
    cmd = [accelerate, "launch", "--config_file", "accelerate_config.yaml", "train.py", "--config",
           "training_args.yaml", "--init_from_config", str(config), "--benchmark", "--steps", str(steps),
           "--warmup_steps", "1", "--measured_out", str(out)]
    proc = subprocess.run(cmd, cwd=bundle, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert not (bundle / "output").exists()  # a benchmark saves nothing
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dpo", "grpo"])
def test_dpo_and_grpo_bundles_benchmark_and_write_measured_json_like_sft(tmp_path, kind):
    from advisor.workload.measurements import parse

    rng = random.Random(0)
    if kind == "dpo":
        rows = [{"prompt": " ".join(rng.choice(WORDS) for _ in range(6)), "chosen": " " + " ".join(WORDS[:4]),
                 "rejected": " " + " ".join(WORDS[4:7])} for _ in range(32)]
        c = rl_candidate(Objective(kind="dpo"), seq_len=128)
    else:
        rows = [{"prompt": " ".join(rng.choice(WORDS) for _ in range(5))} for _ in range(16)]
        o = Objective(kind="grpo", num_generations=2, max_completion_length=8, prompt_length=40, vllm="colocate")
        c = rl_candidate(o, method="full", micro_batch=2, grad_accum=1, seq_len=48)
    data = _benchmark(_bundle(c, tmp_path, rows), tmp_path, steps=2)
    m = parse(data, "measured.json")  # the planner's own reader accepts it
    assert m.stack.objective.kind == kind and m.weights == "random-init"
    assert (m.shape.micro_batch, m.shape.seq_len, m.shape.grad_accum) == (c.shape.micro_batch, c.shape.seq_len,
                                                                          c.shape.grad_accum)
    assert m.step_seconds.count == 2 and m.warmup_steps == 1
    rows_per_step = (2 if kind == "dpo" else 1) * c.shape.micro_batch * c.shape.grad_accum  # one process
    assert m.tokens_per_sec == pytest.approx(rows_per_step * c.shape.seq_len * 2 / m.wall_seconds)


# --- a release before transformers 5.24 (the lent H200's image had 5.17.0) ---------------------------------------


@dataclasses.dataclass
class _Before524:
    """The checkpointing fields of TrainingArguments as transformers < 5.24 names them (no activation_* names)."""
    gradient_checkpointing: bool = False
    gradient_checkpointing_kwargs: dict | None = None
    learning_rate: float = 5e-5


def _template(files: dict[str, str], tmp_path: Path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(files["train.py"])
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_both_train_scripts_rename_checkpointing_fields_for_a_release_before_5_24(tmp_path, kind):
    ckpt = {"activation_checkpointing": True, "activation_checkpointing_kwargs": {"use_reentrant": False}}
    if kind == "dpo":
        files = files_of(rl_candidate(Objective(kind="dpo"), grad_checkpointing=True))
        fields, config_class = trl_config(files), trl.DPOConfig
    else:
        files = files_of(rl_candidate(Objective(kind="sft"), grad_checkpointing=True))
        fields, config_class = yaml.safe_load(files["training_args.yaml"])["training"], trl.SFTConfig
    assert {k: fields[k] for k in ckpt} == ckpt  # what the bundle writes: transformers >= 5.24's names
    module = _template(files, tmp_path, f"bundle_{kind}")
    assert module.for_this_release(config_class, fields) == fields  # today's release knows them as written
    old = module.for_this_release(_Before524, {**ckpt, "learning_rate": 1e-4})
    assert old == {"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": False},
                   "learning_rate": 1e-4}
    assert _Before524(**old).gradient_checkpointing  # the planned checkpointing survives the rename
    with pytest.raises(SystemExit) as refused:
        module.for_this_release(_Before524, {"not_a_field": 1})
    assert "not_a_field" in str(refused.value) and "requirements.txt" in str(refused.value)
