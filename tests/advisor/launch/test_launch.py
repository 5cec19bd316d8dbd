"""Launch bundles: accelerate, transformers, peft and SkyPilot accept what we write, with the values we meant."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from helpers.launch_fixtures import candidate, sft_config, spec, write_plan

from advisor.launch.bundle import DECODER_LAYERS, TEMPLATES, LaunchWarning, build_bundle, write_bundle

# (sharding, offload, gpus per node, nodes) -> the accelerate mode it must become
CONFIGS = [
    ("none", "none", 1, 1, "NO"),
    ("ddp", "none", 8, 1, "MULTI_GPU"),
    ("ddp", "none", 8, 2, "MULTI_GPU"),
    ("fsdp", "none", 8, 1, "FSDP"),
    ("fsdp", "params", 8, 2, "FSDP"),
    ("zero2", "optimizer", 8, 1, "DEEPSPEED"),
    ("zero3", "both", 8, 2, "DEEPSPEED"),
    ("zero3", "none", 4, 1, "DEEPSPEED"),
]


def bundle(c, family="llama", **kw) -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LaunchWarning)
        return build_bundle(c, spec(family), **kw)


def launcher_check(path: Path):
    """accelerate 1.15.0's own loader, launcher merge, worker env and plugin (reference §7.3)."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import patch_environment
    from accelerate.utils.launch import (
        prepare_deepspeed_cmd_env,
        prepare_multi_gpu_env,
        prepare_simple_launcher_cmd_env,
    )

    cfg = load_config_from_file(str(path))
    parser = launch_command_parser()
    known = {a.dest for a in parser._actions}
    for section, prefix in (("fsdp_config", "fsdp_"), ("deepspeed_config", "")):
        for key in getattr(cfg, section) or {}:
            dest = key if key.startswith(prefix) else prefix + key
            assert dest in known, f"{section}.{key} is not an accelerate launch option (would be ignored)"
    args = parser.parse_args(["--config_file", str(path), "train.py"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    if args.use_deepspeed:
        fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(args)
    elif args.use_fsdp or args.multi_gpu:
        env = prepare_multi_gpu_env(args)
    else:
        _, env = prepare_simple_launcher_cmd_env(args)
    added = {k: v for k, v in env.items() if os.environ.get(k) != v and k != "PYTHONPATH"}
    plugin = None
    with patch_environment(**added):
        if args.use_fsdp:
            from accelerate.utils import FullyShardedDataParallelPlugin

            plugin = FullyShardedDataParallelPlugin()
        if args.use_deepspeed:
            from accelerate.utils import DeepSpeedPlugin

            plugin = DeepSpeedPlugin()
    return cfg, args, plugin


@pytest.mark.parametrize("sharding,offload,per_node,nodes,expected", CONFIGS)
def test_every_accelerate_config_loads_with_accelerates_launcher(tmp_path, monkeypatch, sharding, offload, per_node, nodes,
                                                                 expected):
    c = candidate(sharding=sharding, offload=offload, gpu_count=per_node, nodes=nodes, grad_accum=4)
    files = bundle(c)
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(files["accelerate_config.yaml"])
    if expected == "DEEPSPEED":  # the yaml names ds_config.json relative to the bundle (train.py resolves it there)
        (tmp_path / "ds_config.json").write_text(files["ds_config.json"])
        monkeypatch.chdir(tmp_path)
    cfg, args, plugin = launcher_check(path)

    assert cfg.distributed_type.value == expected  # an enum, not the YAML-1.1 boolean False
    assert cfg.num_processes == per_node * nodes and cfg.num_machines == nodes
    # DeepSpeed's precision lives in ds_config.json: accelerate refuses mixed_precision beside a config file
    assert cfg.mixed_precision == (None if expected == "DEEPSPEED" else "no")
    if nodes > 1:
        assert cfg.main_process_ip and cfg.main_process_port == 29500
    if expected == "FSDP":
        _assert_fsdp_plugin(plugin, offload)
    if expected == "DEEPSPEED":
        _assert_deepspeed_plugin(plugin, files, sharding, offload)
    if expected == "MULTI_GPU":
        assert args.multi_gpu and args.num_processes == per_node * nodes


def _assert_fsdp_plugin(plugin, offload):
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert plugin.transformer_cls_names_to_wrap == ["LlamaDecoderLayer"]
    assert plugin.activation_checkpointing is True
    assert plugin.state_dict_type.name == "SHARDED_STATE_DICT"
    assert bool(getattr(plugin.cpu_offload, "pin_memory", False)) == (offload == "params")


def _assert_deepspeed_plugin(plugin, files, sharding, offload):
    zero = plugin.deepspeed_config["zero_optimization"]
    assert zero["stage"] == int(sharding[-1])
    assert zero.get("offload_optimizer", {}).get("device", "none") == ("cpu" if offload in ("optimizer", "both") else "none")
    assert zero.get("offload_param", {}).get("device", "none") == ("cpu" if offload == "both" else "none")
    assert plugin.deepspeed_config["gradient_accumulation_steps"] == 4
    assert plugin.deepspeed_config["bf16"]["enabled"] is True
    assert plugin.zero3_init_flag == (sharding == "zero3")
    section = yaml.safe_load(files["accelerate_config.yaml"])["deepspeed_config"]
    assert section == {"deepspeed_config_file": "ds_config.json", "deepspeed_multinode_launcher": "standard",
                       "zero3_init_flag": sharding == "zero3"}


@pytest.mark.parametrize("gpus", [1, 4])
def test_deepspeed_reads_the_bundles_zero3_buffers_exactly_as_the_estimate_used_them(monkeypatch, gpus):
    """The bundle's ds_config.json through DeepSpeed's own DeepSpeedConfig / DeepSpeedZeroConfig: the bucket
    sizes it enforces are the ones advisor.estimate.memory sized the zero3_* components with."""
    import json

    import deepspeed  # the test extra installs it (pyproject.toml): missing is a failure
    from deepspeed.runtime.config import DeepSpeedConfig

    from advisor.api import estimate_memory
    from advisor.estimate.memory import DEEPSPEED_ZERO3

    c = candidate(sharding="zero3", gpu_count=gpus, micro_batch=2, grad_accum=4, precision="bf16")
    ds = json.loads(bundle(c)["ds_config.json"])

    class DataParallel:  # DeepSpeed asks an mpu for the data-parallel world size
        @staticmethod
        def get_data_parallel_world_size():
            return gpus

    monkeypatch.setattr(deepspeed.comm, "get_rank", lambda *a, **k: 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = DeepSpeedConfig(ds, mpu=DataParallel())
    z = cfg.zero_config
    assert cfg.zero_optimization_stage == 3 and cfg.train_batch_size == 2 * 4 * gpus
    assert cfg.gradient_accumulation_steps == 4 and cfg.bfloat16_config.enabled
    assert (z.reduce_bucket_size, z.prefetch_bucket_size, z.max_live_parameters, z.max_reuse_distance,
            z.param_persistence_threshold, z.contiguous_gradients) == (
        DEEPSPEED_ZERO3["reduce_bucket_size"], DEEPSPEED_ZERO3["stage3_prefetch_bucket_size"],
        DEEPSPEED_ZERO3["stage3_max_live_parameters"], DEEPSPEED_ZERO3["stage3_max_reuse_distance"],
        DEEPSPEED_ZERO3["stage3_param_persistence_threshold"], DEEPSPEED_ZERO3["contiguous_gradients"])
    est = estimate_memory(spec(), c.stack, c.shape)
    assert est.components["overhead.zero3_reduce_bucket"].bytes == z.reduce_bucket_size * 2
    unit = 128256 * 4096  # lm_head, the largest module of the fixture's Llama-3.1-8B
    live = min(unit + min(z.max_live_parameters, z.max_reuse_distance), est.model.params_total)
    assert est.components["weights.zero3_live_params"].bytes == live * 2


def with_stack(c, **fields):
    """The candidate with stack fields the flat candidate() fixture does not name (liger, dora, ...)."""
    return c.model_copy(update={"stack": c.stack.model_copy(update=fields)})


def test_technique_switches_load_into_transformers_and_peft():
    from peft import LoraConfig
    c = with_stack(candidate(method="lora", lora_rank=8, sharding="none", gpu_count=1),
                   liger=True, compile=True, dora=True, modules_to_save="embed_tokens",
                   lora_targets="q_proj,v_proj")
    files = bundle(c)
    args = yaml.safe_load(files["training_args.yaml"])
    ta = sft_config(args["training"])
    assert ta.use_liger_kernel is True and ta.torch_compile is True
    lora = LoraConfig(**args["lora"])
    assert lora.use_dora is True and list(lora.modules_to_save) == ["embed_tokens"]
    assert "TRL fused LM head" in args["estimate"]["loss"]  # what TRL computes, Liger or not
    assert "liger-kernel==0.8.5" in files["requirements.txt"].split()


def test_lm_head_target_reaches_peft_and_a_chunked_loss_is_trls_own():
    from peft import LoraConfig

    c = with_stack(candidate(method="lora", sharding="none", gpu_count=1), lora_targets="q_proj,v_proj,lm_head",
                   loss="chunked", modules_to_save="embed_tokens")
    args = yaml.safe_load(bundle(c)["training_args.yaml"])
    lora = LoraConfig(**args["lora"])
    assert set(lora.target_modules) == {"q_proj", "v_proj", "lm_head"}
    # TRL's SFTTrainer computes the loss chunked itself (its fused LM head): no loss function of the bundle's own
    assert "loss" not in args and "compute_loss_func" not in (TEMPLATES / "train.py").read_text()
    # TRL refuses an adapter on lm_head: the bundle says so (train.py stops with one line)
    assert "refuses a LoRA adapter on lm\\_head" in bundle(c)["README.md"]
    assert "use_liger_kernel" not in args["training"] and "torch_compile" not in args["training"]


def test_multi_node_launch_uses_rank_and_head_ip_from_the_command_line(tmp_path):
    c = candidate(sharding="fsdp", gpu_count=8, nodes=2)
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(bundle(c)["accelerate_config.yaml"])
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    parser = launch_command_parser()
    args = parser.parse_args(["--config_file", str(path), "--machine_rank", "1", "--main_process_ip", "10.0.0.7",
                              "train.py"])
    args, _, _ = _validate_launch_command(args)
    prepare_multi_gpu_env(args)
    assert (int(args.nnodes), int(args.node_rank), int(args.nproc_per_node)) == (2, 1, 8)
    assert args.rdzv_endpoint == "10.0.0.7:29500"


@pytest.mark.parametrize("precision,expected_mp,expected_dtype", [
    ("bf16", "no", "bfloat16"), ("amp-bf16", "bf16", "float32"), ("fp32", "no", "float32"),
    ("amp-fp16", "fp16", "float32"), ("fp16", "no", "float16"),
])
def test_pure_16bit_weights_never_get_upcast_by_fsdp(precision, expected_mp, expected_dtype):
    # accelerate's FSDP2 upcasts trainable params to fp32 whenever mixed_precision != 'no'.
    files = bundle(candidate(precision=precision, sharding="fsdp"))
    acc = yaml.safe_load(files["accelerate_config.yaml"])
    args = yaml.safe_load(files["training_args.yaml"])
    assert acc["mixed_precision"] == expected_mp
    assert args["training"]["model_init_kwargs"]["dtype"] == expected_dtype
    assert args["training"]["bf16"] == (expected_mp == "bf16") and args["training"]["fp16"] == (expected_mp == "fp16")
    sft = sft_config(args["training"])  # TRL's own defaults (bf16 on, fp32 weights) do not leak through
    assert (sft.bf16, sft.fp16) == (expected_mp == "bf16", expected_mp == "fp16")
    assert sft.model_init_kwargs["dtype"] == expected_dtype


def test_training_args_match_the_estimate_and_load_into_transformers_and_peft():
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    c = candidate(method="qlora", lora_rank=32, optimizer="paged-adamw-8bit", micro_batch=3, grad_accum=5,
                  seq_len=4096, attention="flash", sharding="fsdp", precision="bf16")
    args = yaml.safe_load(bundle(c)["training_args.yaml"])
    ta = sft_config(args["training"])
    assert (ta.per_device_train_batch_size, ta.gradient_accumulation_steps) == (3, 5)
    assert ta.optim.value == "paged_adamw_8bit"
    assert ta.activation_checkpointing is False  # FSDP does it: transformers refuses both (TRL's default is on)
    acc = yaml.safe_load(bundle(c)["accelerate_config.yaml"])
    assert acc["fsdp_config"]["fsdp_activation_checkpointing"] is True
    lora = LoraConfig(**args["lora"])
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, lora.target_modules) == (32, 64, 0.05, "all-linear")
    # BitsAndBytesConfig silently ignores misspelt kwargs: every key must be a real field.
    import inspect

    assert set(args["quantization"]) <= set(inspect.signature(BitsAndBytesConfig.__init__).parameters)
    bnb = BitsAndBytesConfig(**args["quantization"])
    assert bnb.load_in_4bit and bnb.bnb_4bit_quant_type == "nf4" and bnb.bnb_4bit_use_double_quant
    assert str(bnb.bnb_4bit_compute_dtype) == "torch.bfloat16" and str(bnb.bnb_4bit_quant_storage) == "torch.bfloat16"
    assert ta.model_init_kwargs["attn_implementation"] == "flash_attention_2" and ta.model_init_kwargs["device_map"] is None
    assert (ta.max_length, ta.packing, ta.packing_strategy) == (4096, True, "bfd")  # padding-free with FlashAttention


@pytest.mark.parametrize("ours,hf", [("adamw", "adamw_torch_fused"), ("adamw-8bit", "adamw_bnb_8bit"),
                                     ("sgd", "sgd"), ("adafactor", "adafactor"), ("adamw-fp32", "adamw_torch_fused")])
def test_every_optimizer_maps_to_a_valid_transformers_name(ours, hf):
    c = candidate(optimizer=ours, sharding="none", gpu_count=1, grad_checkpointing=True)
    args = yaml.safe_load(bundle(c)["training_args.yaml"])
    ta = sft_config(args["training"])
    assert ta.optim.value == hf and ta.activation_checkpointing is True


def test_lora_target_list_and_options_from_the_plan():
    from peft import LoraConfig

    c = candidate(method="lora", lora_rank=8, sharding="none", gpu_count=1)
    c = c.model_copy(update={"stack": c.stack.model_copy(update={"lora_targets": "q_proj, v_proj", "lora_alpha": 8})})
    args = yaml.safe_load(bundle(c)["training_args.yaml"])  # the candidate's own stack, nothing merged in
    lora = LoraConfig(**args["lora"])
    assert set(lora.target_modules) == {"q_proj", "v_proj"} and lora.lora_alpha == 8
    assert args["quantization"] is None


@pytest.mark.parametrize("family", sorted(DECODER_LAYERS))
def test_fsdp_wraps_a_decoder_class_that_exists_in_transformers(family):
    import importlib

    module_name = family.removesuffix("_text")
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    layer = DECODER_LAYERS[family]
    assert hasattr(module, layer)
    no_split = {cls for name in dir(module) if name.endswith("ForCausalLM")
                for cls in (getattr(module, name)._no_split_modules or [])}
    assert layer in no_split


def test_unknown_family_falls_back_to_size_based_wrapping_with_a_warning(tmp_path):
    with pytest.warns(LaunchWarning, match="no known decoder-layer class"):
        files = build_bundle(candidate(sharding="fsdp"), spec("falcon_h1"))
    acc = yaml.safe_load(files["accelerate_config.yaml"])
    assert acc["fsdp_config"]["fsdp_auto_wrap_policy"] == "SIZE_BASED_WRAP"
    assert "fsdp_transformer_layer_cls_to_wrap" not in acc["fsdp_config"]
    assert "no known decoder-layer class" in files["README.md"]
    path = tmp_path / "a.yaml"
    path.write_text(files["accelerate_config.yaml"])
    _, _, plugin = launcher_check(path)
    assert plugin.min_num_params == 100_000_000


def test_readme_states_expected_memory_time_cost_and_command():
    readme = bundle(candidate(nodes=2))["README.md"]
    assert "61.0 GB" in readme and "3.50 h" in readme and "$114.70" in readme
    assert "bash launch.sh" in readme and "sky launch sky.yaml" in readme


def fake_accelerate(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "accelerate").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    (bin_dir / "accelerate").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "MACHINE_RANK", "MAIN_PROCESS"))}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env


def test_multi_node_launch_script_takes_rank_and_head_ip_from_skypilot(tmp_path):
    out = write_bundle(bundle(candidate(nodes=2)), tmp_path / "b")
    env = fake_accelerate(tmp_path)
    env.update(SKYPILOT_NODE_RANK="1", SKYPILOT_NODE_IPS="10.1.0.4\n10.1.0.5")
    run = subprocess.run(["bash", str(out / "launch.sh"), "--max_steps", "3"], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    argv = run.stdout.split("\n")
    assert argv[argv.index("--machine_rank") + 1] == "1"
    assert argv[argv.index("--main_process_ip") + 1] == "10.1.0.4"
    assert argv[argv.index("--config_file") + 1] == str(out / "accelerate_config.yaml")
    assert argv[-3:-1] == ["--max_steps", "3"]
    # outside SkyPilot, without MACHINE_RANK: a clear refusal
    env.pop("SKYPILOT_NODE_RANK")
    run = subprocess.run(["bash", str(out / "launch.sh")], env=env, capture_output=True, text=True)
    assert run.returncode == 2 and "MACHINE_RANK" in run.stderr


def test_sky_yaml_has_the_candidates_machines():
    task = yaml.safe_load(bundle(candidate(nodes=2, spot=True, provider="lambda", gpu_model="H100",
                                           instance_type="gpu_8x_h100_sxm5", region="us-east-1"))["sky.yaml"])
    assert task["resources"] == {"cloud": "lambda", "region": "us-east-1", "instance_type": "gpu_8x_h100_sxm5",
                                 "accelerators": "H100:8", "use_spot": True}
    assert task["num_nodes"] == 2 and "launch.sh" in task["run"] and "requirements.txt" in task["setup"]
    # SkyPilot's own loader (its task schema, then its catalog): tests/advisor/launch/test_sky_yaml.py, in a child with a private HOME


def test_existing_folder_is_never_overwritten_silently(tmp_path):
    files = bundle(candidate())
    out = tmp_path / "b"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="--force") as err:
        write_bundle(files, out)
    assert err.value.exit_code == 2 and not (out / "train.py").exists()
    write_bundle(files, out, force=True)
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == sorted([*files, "notes.txt"])  # no temp files left
    assert os.access(out / "launch.sh", os.X_OK)


def run_cli(*args):
    from cli import cli

    return CliRunner().invoke(cli, list(args))


def test_cli_writes_the_bundle_for_the_chosen_rank(tmp_path):
    plan = write_plan(tmp_path / "plan.json", [candidate(), candidate(rank=2, sharding="zero3", gpu_count=4)])
    result = run_cli("launch", "--from", str(plan), "--rank", "2", "--out", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    acc = yaml.safe_load((tmp_path / "b" / "accelerate_config.yaml").read_text())
    assert acc["distributed_type"] == "DEEPSPEED" and acc["num_processes"] == 4


def test_cli_plans_inline_from_plan_options_and_bundles_exactly_that_candidate(tmp_path):
    from cli.plan import build_plan

    opts = ["--model", "qwen2.5-0.5b", "--tokens", "5M", "--gpu", "A10G", "--providers", "aws"]
    result = run_cli("launch", *opts, "--rank", "2", "--out", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    expected = build_plan(model="qwen2.5-0.5b", tokens="5M", gpu="A10G", providers="aws").candidates[1]
    args = yaml.safe_load((tmp_path / "b" / "training_args.yaml").read_text())
    assert args["training"]["per_device_train_batch_size"] == expected.shape.micro_batch
    assert args["training"]["gradient_accumulation_steps"] == expected.shape.grad_accum
    assert args["training"]["activation_checkpointing"] == expected.stack.grad_checkpointing \
        or expected.stack.sharding == "fsdp"


def test_launch_without_a_plan_or_plan_options_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "advisor", "launch", "--out", str(tmp_path / "b")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--from" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_rank_beyond_the_plan_is_one_line_exit_2(tmp_path):
    plan = write_plan(tmp_path / "plan.json", [candidate()])
    proc = subprocess.run([sys.executable, "-m", "advisor", "launch", "--from", str(plan), "--rank", "3",
                           "--out", str(tmp_path / "b")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --rank: must be between 1 and 1 for this plan (got 3)."
    assert not (tmp_path / "b").exists()


def test_cli_refuses_an_existing_folder_unless_forced(tmp_path):
    plan = write_plan(tmp_path / "plan.json", [candidate()])
    out = tmp_path / "b"
    out.mkdir()
    (out / "x").write_text("keep")
    proc = subprocess.run([sys.executable, "-m", "advisor", "launch", "--from", str(plan), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--force" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert run_cli("launch", "--from", str(plan), "--out", str(out), "--force").exit_code == 0
    assert (out / "train.py").exists() and (out / "x").read_text() == "keep"


def test_cli_warns_about_unknown_family_on_stderr(tmp_path):
    plan = write_plan(tmp_path / "plan.json", [candidate()], family="falcon_h1", name="my-falcon-h1")
    proc = subprocess.run([sys.executable, "-m", "advisor", "launch", "--from", str(plan), "--out",
                           str(tmp_path / "b")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "SIZE_BASED_WRAP" in proc.stderr


# ----------------------------------------------------------------------------- bundles of real plan candidates
PLANS = {  # plans on the bundled sheet whose candidates cover every stack the planner picks (methods, sharding,
    # ZeRO offload, 8-bit AdamW, Liger on/off, MoE expert LoRA)
    "8b-any": dict(model="llama-3.1-8b", tokens="100M", methods="full,lora,qlora", all_stacks=True, top=200),
    "moe-lora": dict(model="qwen3-30b-a3b", tokens="50M", methods="lora", top=20),
    "70b-full": dict(model="llama-3.1-70b", tokens="100M", methods="full", max_nodes=2, all_stacks=True, top=100),
}
VERSIONS = Path(__file__).parents[3] / "advisor" / "launch" / "templates" / "versions.json"


@pytest.fixture(scope="module")
def planned() -> dict:
    """Each plan once; per plan one candidate per distinct stack (method, sharding, offload, optimizer,
    attention, Liger)."""
    from advisor.model.catalog import load_model
    from cli.plan import build_plan

    out = {}
    for name, kw in PLANS.items():
        plan = build_plan(**kw, time_value=0)  # on cost alone: the sample keeps the long, slow stacks too
        sample: dict = {}
        for c in plan.candidates:
            st = c.stack
            key = (st.method, st.sharding, st.offload, st.optimizer, st.attention, st.liger, c.nodes > 1)
            sample.setdefault(key, c)
        out[name] = (load_model(kw["model"]), list(sample.values()))
    return out


def _needed(files: dict[str, str]) -> set[str]:
    """The packages the bundle's own configs make train.py import (transformers imports bitsandbytes for a
    4-bit load or a bnb optimizer, liger-kernel for use_liger_kernel; accelerate imports deepspeed)."""
    args = yaml.safe_load(files["training_args.yaml"])
    acc = yaml.safe_load(files["accelerate_config.yaml"])
    needed = {"torch", "transformers", "trl", "datasets", "accelerate", "pyyaml"} | ({"peft"} if args["lora"] else set())
    if args["quantization"] or "bnb" in args["training"]["optim"] or "8bit" in args["training"]["optim"]:
        needed.add("bitsandbytes")
    if args["training"].get("use_liger_kernel"):
        needed.add("liger-kernel")
    if acc["distributed_type"] == "DEEPSPEED":
        needed.add("deepspeed")
    return needed


def test_every_planned_stack_pins_exactly_the_packages_its_train_py_imports(planned):
    import json

    table = json.loads(VERSIONS.read_text())["packages"]
    seen_stacks = 0
    for spec_, sample in planned.values():
        for c in sample:
            files = bundle_of(c, spec_)
            pins = dict(line.split("==") for line in files["requirements.txt"].split())
            assert set(pins) == _needed(files), (c.label, pins)
            assert all(pins[p] == table[p] for p in pins), pins
            setup = yaml.safe_load(files["sky.yaml"])["setup"]
            assert ("flash-attn" in setup) == (c.stack.attention == "flash")
            if c.stack.attention == "flash":  # a CUDA build: sky.yaml installs it pinned, train.py falls back to SDPA
                assert f"flash-attn=={table['flash-attn']} " in setup and "flash-attn" not in pins
            seen_stacks += 1
    assert seen_stacks >= 15  # the sample really spans the planner's stacks


def test_the_pins_are_releases_and_every_package_the_cpu_tests_run_is_installed():
    """A bundle pins what it was validated with (versions.json); the tests run whatever the index serves today and
    check that the bundle's files load with it (accelerate's, DeepSpeed's, TRL's and SkyPilot's own loaders below),
    never that the installed version equals the pin."""
    import json
    from importlib import metadata

    from packaging.version import Version

    table = json.loads(VERSIONS.read_text())
    for package, pin in table["packages"].items():
        assert str(Version(pin)) == pin, (package, pin)  # an exact, canonical release string
    for package in table["tested_on_cpu"]:
        assert metadata.version(package), package  # installed, so the CPU end-to-end tests really ran it


def bundle_of(c, spec_) -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LaunchWarning)
        return build_bundle(c, spec_)


def test_save_steps_follow_the_checkpoint_interval_the_plans_cost_assumes(planned):
    checked = 0
    for spec_, sample in planned.values():
        for c in sample:
            t = c.timing
            steps = yaml.safe_load(bundle_of(c, spec_)["training_args.yaml"])["training"]["save_steps"]
            assert t.checkpoint_interval_hours > 0 and t.step_seconds > 0
            # within half a step of the interval (or one step when a step is longer than the interval)
            assert abs(steps * t.step_seconds - t.checkpoint_interval_hours * 3600) <= t.step_seconds / 2 + 1e-6 or steps == 1
            checked += 1
    spec_, sample = planned["8b-any"]
    training = yaml.safe_load(bundle_of(sample[0], spec_)["training_args.yaml"])["training"]
    ta = sft_config(training)
    assert ta.save_strategy.value == "steps" and ta.save_steps == training["save_steps"]
    assert checked >= 15


def test_zero_optimizer_offload_bundle_says_deepspeeds_cpu_adam_is_what_trains(planned):
    spec_, sample = planned["70b-full"]
    c = next(c for c in sample if c.stack.sharding == "zero3" and c.stack.offload == "optimizer")
    with pytest.warns(LaunchWarning, match="DeepSpeedCPUAdam"):
        files = build_bundle(c, spec_)
    args = yaml.safe_load(files["training_args.yaml"])
    assert "DeepSpeedCPUAdam" in args["estimate"]["runs_as"] and "DeepSpeedCPUAdam" not in args["estimate"]["stack"]
    assert "What actually trains" in files["README.md"] and "DeepSpeedCPUAdam" in files["README.md"]
    dense = next(c for c in sample if c.stack.offload == "none")
    assert yaml.safe_load(bundle_of(dense, spec_)["training_args.yaml"])["estimate"]["runs_as"] == dense.label


def tiny_qwen3_moe():
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("qwen3_moe", vocab_size=300, hidden_size=32, intermediate_size=64,
                               moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2)
    return AutoModelForCausalLM.from_config(cfg)


def test_moe_expert_lora_bundle_writes_the_dropout_peft_accepts_on_a_real_moe(planned):
    from peft import LoraConfig, get_peft_model

    spec_, sample = planned["moe-lora"]
    c = sample[0]
    assert c.stack.lora_dropout > 0 and c.stack.lora_targets == "all-linear"  # what the plan's stack says
    with pytest.warns(LaunchWarning, match="lora_dropout is written as 0"):
        files = build_bundle(c, spec_)
    lora = yaml.safe_load(files["training_args.yaml"])["lora"]
    assert lora["lora_dropout"] == 0
    assert "lora\\_dropout is written as 0" in files["README.md"]  # Markdown-escaped
    model = get_peft_model(tiny_qwen3_moe(), LoraConfig(**lora))  # peft wraps the fused experts: accepted
    assert any(type(m).__name__ == "ParamWrapper" for m in model.modules())
    with pytest.raises(ValueError):  # control: the plan's own dropout is refused by the expert wrapper
        get_peft_model(tiny_qwen3_moe(), LoraConfig(**{**lora, "lora_dropout": c.stack.lora_dropout}))


def test_training_args_use_no_argument_transformers_deprecates(planned):
    for spec_, sample in planned.values():
        for c in sample[:4]:
            training = yaml.safe_load(bundle_of(c, spec_)["training_args.yaml"])["training"]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sft_config(training)
            deprecations = [w for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))
                            and "transformers" in w.filename]
            assert deprecations == [], [str(w.message) for w in deprecations]


def _train_py():
    import importlib.util

    from advisor.launch.bundle import TEMPLATES

    spec_ = importlib.util.spec_from_file_location("bundle_train_py", TEMPLATES / "train.py")
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module


def test_without_flash_attn_train_py_falls_back_to_sdpa_and_says_so_but_a_benchmark_refuses(capsys):
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    train_py = _train_py()
    assert train_py.resolve_attention("flash_attention_2", benchmark=False) == "sdpa"
    assert "falls back to PyTorch SDPA" in capsys.readouterr().out
    assert train_py.resolve_attention("sdpa", benchmark=False) == "sdpa"
    with pytest.raises(SystemExit) as stop:
        train_py.resolve_attention("flash_attention_2", benchmark=True)
    assert "flash-attn" in str(stop.value)


def test_bundle_readme_has_the_gated_model_step_the_data_format_and_the_pinned_install():
    readme = bundle(candidate(attention="flash"))["README.md"]
    assert "HF_TOKEN" in readme and "licence" in readme
    rows = [line.strip() for line in readme.splitlines() if line.strip().startswith('{"messages": ')]
    assert len(rows) == 2 and all(__import__("json").loads(r)["messages"][-1]["role"] == "assistant" for r in rows)
    assert "--train-on-all-tokens" in readme and "pip install -r requirements.txt" in readme
    assert "flash-attn==" in readme and "SDPA" in readme


def test_every_caveat_launch_prints_is_in_the_bundle_readme_and_in_the_report(tmp_path):
    """One list (advisor.launch.caveats): what `launch` warns about on stderr for a rank is in that bundle's
    README and in the report's launch caveats for that rank."""
    import reports
    from advisor.results import Plan
    from advisor.text import md

    cands = [candidate(rank=1, method="qlora", lora_rank=16, sharding="fsdp", optimizer="adamw", gpu_count=8),
             candidate(rank=2, sharding="zero3", offload="optimizer", optimizer="adamw-8bit", gpu_count=8),
             candidate(rank=3, sharding="none", gpu_count=1)]
    plan_file = write_plan(tmp_path / "plan.json", cands)
    page = reports.render(Plan.model_validate_json(plan_file.read_text()), "html")
    import html as html_lib

    page_text = html_lib.unescape(page)
    listed = page_text.split('<ul class="caveats">')[1].split("</ul>")[0].split("<li>")[1:]
    for rank in (1, 2, 3):
        out = tmp_path / f"b{rank}"
        result = run_cli("launch", "--from", str(plan_file), "--rank", str(rank), "--out", str(out))
        assert result.exit_code == 0, result.output
        printed = [line.removeprefix("warning: ") for line in result.stderr.splitlines()
                   if line.startswith("warning: ")]
        assert bool(printed) == (rank != 3), printed
        readme = (out / "README.md").read_text()
        for note in printed:
            assert md(note) in readme
            item = next(li for li in listed if note in li)
            assert f"#{rank}" in item.split(":", 1)[0], item  # listed for this rank
    assert "FSDP2 with bitsandbytes 4-bit weights is not verified" in page_text
    assert "DeepSpeedCPUAdam" in page_text


def test_the_default_8b_plans_bundle_checkpoints_before_its_end():
    """The default plan (Llama-3.1-8B, 100M tokens, a 3 h run) checkpoints about every hour, not only at the end
    (billing.json max_interval_hours: Young's optimum for hardware failures alone would be longer than the run)."""
    import math

    from advisor.launch.bundle import save_steps
    from cli.plan import build_plan

    p = build_plan(model="llama-3.1-8b", tokens="100M", time_value=0)  # cost alone: the multi-hour pick
    top = p.candidates[0]
    steps = math.ceil(p.workload["train_tokens"] / (top.shape.micro_batch * top.shape.seq_len * top.shape.grad_accum
                                                   * top.stack.gpus))
    every = save_steps(top)
    assert top.timing.train_hours > 1
    assert steps // every >= 2, (steps, every)  # two checkpoints or more before the final save
    assert every * top.timing.step_seconds <= 3600 + top.timing.step_seconds


def test_every_planned_run_over_an_hour_checkpoints_hourly_unless_writes_would_cost_over_5_percent(planned):
    """billing.json: at most max_interval_hours (1 h) between checkpoints, longer only where writing hourly would take
    more than max_write_share (5 %) of the training time (a 70B full fine-tune's 4-minute writes), and never more than
    half the run."""
    import math

    hourly = slower = 0
    for _, sample in planned.values():
        for c in sample:
            t = c.timing
            if t.train_hours <= 1:
                continue
            assert t.checkpoint_interval_hours < t.train_hours, c.label  # never only at the end
            if t.checkpoint_interval_hours <= 1.0 + 1e-9:
                hourly += 1
                continue
            write = t.checkpoint_hours / math.floor(t.train_hours / t.checkpoint_interval_hours)
            assert t.checkpoint_interval_hours == pytest.approx(min(write / 0.05, t.train_hours / 2), rel=1e-6), c.label
            slower += 1
    assert hourly >= 10 and slower >= 1


def test_readme_says_how_many_tokens_carry_loss_when_the_plan_counted_its_dataset():
    c = candidate(method="lora", sharding="none", gpu_count=1)
    counted = bundle(c, options={"train_tokens": 1_200_000, "dataset_kept_tokens": 1_200_000,
                                 "dataset_loss_tokens": 450_000})["README.md"]
    assert "1,200,000 tokens going through the model" in counted and "450,000 carry loss" in counted
    unknown = bundle(c, options={"train_tokens": 1_200_000})["README.md"]
    assert "1,200,000 tokens going through the model" in unknown
    assert "How many of them carry loss depends on the data" in unknown and "gpu-advisor tokens" in unknown


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen1.5-MoE-A2.7B",
                                   "Qwen/Qwen3-30B-A3B", "google/gemma-2-9b", "google/gemma-3-4b-pt",
                                   "microsoft/Phi-3-mini-4k-instruct"])
def test_the_smoke_config_builds_the_models_architecture_at_toy_size(model, tmp_path):
    """`launch.sh --smoke` random-initialises smoke_config.json: the candidate's own family (MoE experts and a
    vision tower included), small enough for a CPU."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    from advisor.launch.launchers import smoke_config
    from advisor.model.catalog import load_model

    spec_ = load_model(model)
    (tmp_path / "config.json").write_text(json.dumps(smoke_config(spec_)))
    built = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(tmp_path)))
    assert built.config.get_text_config().model_type == AutoConfig.for_model(spec_.family).get_text_config().model_type
    assert sum(p.numel() for p in built.parameters()) < 1_000_000
