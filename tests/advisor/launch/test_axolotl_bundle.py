"""`launch` writes axolotl.yaml when the plan came from an axolotl config: the same stack in axolotl's keys.

advisor/workload/training_config.py (the `plan --from-config` reader, written from axolotl's schema) is the
independent check: the written file, read back, must pin exactly the candidate's stack and shape.
"""

from __future__ import annotations

import json
import warnings

import pytest
import yaml
from helpers.cli_run import gpu_advisor
from helpers.launch_fixtures import candidate, spec

from advisor.launch.bundle import LaunchWarning, build_bundle, write_bundle
from advisor.workload.training_config import read_config

AXOLOTL = {"config_framework": "axolotl", "epochs": 2.0}

# (candidate fields, stack fields the flat fixture does not name)
STACKS = [
    (dict(method="qlora", lora_rank=32, sharding="none", gpu_count=1, optimizer="paged-adamw-8bit",
          attention="flash"), dict(lora_alpha=16, lora_dropout=0.1, lora_targets="q_proj,v_proj")),
    (dict(method="lora", lora_rank=8, sharding="zero3", offload="both", precision="fp16", attention="eager"),
     dict(lora_targets="all-linear", dora=True, modules_to_save="lm_head", liger=True)),
    (dict(method="full", sharding="fsdp", offload="both", grad_checkpointing=True, optimizer="adamw-8bit"),
     dict(loss="chunked", compile=True)),
    (dict(method="full", sharding="zero2", offload="optimizer", precision="fp32", grad_checkpointing=False,
          optimizer="sgd"), {}),
    (dict(method="lora", lora_rank=64, sharding="fsdp", offload="none", attention="sdpa"),
     dict(lora_targets="q_proj,k_proj,v_proj,o_proj")),
]


def _candidate(fields: dict, stack: dict):
    c = candidate(**fields)
    return c.model_copy(update={"stack": c.stack.model_copy(update=stack)})


def _bundle(c, tmp_path, options=AXOLOTL):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LaunchWarning)
        files = build_bundle(c, spec(), dataset="data/train.jsonl", options=options)
    return files, write_bundle(files, tmp_path / "bundle")


def _expected(c) -> dict:
    """The pins the reader must give back: the stack's settings that axolotl's keys can say."""
    st = c.stack
    pins = {"precision": st.precision, "optimizer": "adamw" if st.optimizer == "adamw-fp32" else st.optimizer,
            "attention": st.attention, "grad_checkpointing": st.grad_checkpointing, "liger": st.liger,
            "compile": st.compile}
    # what axolotl runs: transformers' loss unless its chunked or Cut Cross-Entropy option says otherwise
    pins["loss"] = "cce" if st.loss == "cce" else "chunked" if st.loss == "chunked" and not st.liger else "standard"
    if st.sharding not in ("none", "ddp"):
        pins["sharding"] = st.sharding
    if st.offload != "none":
        pins["offload"] = st.offload
    if st.method != "full":
        pins.update(lora_rank=st.lora_rank, lora_alpha=st.lora_alpha, lora_dropout=st.lora_dropout, dora=st.dora,
                    lora_targets=st.lora_targets)
        if st.modules_to_save:
            pins["modules_to_save"] = st.modules_to_save
    return pins


@pytest.mark.parametrize("fields,stack", STACKS, ids=[f"{f['method']}-{f['sharding']}" for f, _ in STACKS])
def test_the_axolotl_yaml_read_back_pins_the_candidates_stack(tmp_path, fields, stack):
    c = _candidate(fields, stack)
    files, folder = _bundle(c, tmp_path)
    assert yaml.safe_load(files["axolotl.yaml"])["base_model"] == spec().name  # plain YAML, no tags
    back = read_config(folder / "axolotl.yaml")
    assert back.framework == "axolotl"
    assert back.unknown == (), back.unknown  # every key written is one axolotl documents
    assert back.options["pins"] == _expected(c)
    assert back.options["methods"] == c.stack.method
    assert (back.options["seq_len"], back.micro_batch, back.grad_accum) == (c.shape.seq_len, c.shape.micro_batch,
                                                                            c.shape.grad_accum)
    assert back.options["padded"] == c.shape.padded and back.options["epochs"] == AXOLOTL["epochs"]
    assert back.text_field == "text"


def test_a_plan_not_made_from_an_axolotl_config_gets_no_axolotl_yaml(tmp_path):
    c = _candidate(*STACKS[0])
    for options in ({}, {"config_framework": "trl"}):
        files, _ = _bundle(c, tmp_path / str(len(options)), options)
        assert "axolotl.yaml" not in files


def test_autocast_precisions_say_axolotl_loads_16_bit_weights(tmp_path):
    c = candidate(method="full", sharding="fsdp", precision="amp-bf16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = build_bundle(c, spec(), options=AXOLOTL)
    assert any("autocast" in str(w.message) for w in caught)
    assert "autocast" in files["axolotl.yaml"].split("\nbase_model")[0]  # said in the file's header too


def test_plan_from_an_axolotl_config_then_launch_writes_the_same_settings(capsys, tmp_path):
    config = tmp_path / "ax.yaml"
    # keys: axolotl src/axolotl/utils/schemas/{model,peft,config,training}.py (commit 067b021c8b87)
    config.write_text("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 16\nlora_alpha: 32\n"
                      "lora_target_linear: true\nsequence_len: 1024\nsample_packing: true\nmicro_batch_size: 2\n"
                      "gradient_accumulation_steps: 4\nnum_epochs: 3\nbf16: true\ngradient_checkpointing: true\n"
                      "sdp_attention: true\noptimizer: adamw_torch_fused\n")
    code, out, err = gpu_advisor(capsys, "plan", "--from-config", config, "--tokens", "2000000", "--gpu", "L4",
                                 "--providers", "aws", "--top", "3", "--format", "json")
    assert code == 0, err
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    assert json.loads(out)["assumptions"]["config_framework"] == "axolotl"
    code, _, err = gpu_advisor(capsys, "launch", "--from", plan, "--out", tmp_path / "b")
    assert code == 0, err
    first = read_config(config)
    back = read_config(tmp_path / "b" / "axolotl.yaml")
    assert {k: back.options["pins"][k] for k in first.options["pins"]} == first.options["pins"]
    top = json.loads(out)["candidates"][0]["shape"]  # the planner may split the global batch 2 x 4 its own way
    assert (back.micro_batch, back.grad_accum) == (top["micro_batch"], top["grad_accum"])
    assert back.micro_batch * back.grad_accum == 2 * 4
    assert (back.options["seq_len"], back.options["epochs"]) == (1024, 3.0)
