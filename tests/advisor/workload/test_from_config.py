"""`plan --from-config`: an axolotl, LLaMA-Factory, TRL or torchtune config becomes the plan's pins.

The configs are written here from each framework's documented keys (cited beside each one); every
candidate of the plan must carry the config's settings, and keys the reader does not understand must
be listed (stderr and the plan's JSON), never dropped.
"""

from __future__ import annotations

import json

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

pytest.importorskip("pyarrow")
pytest.importorskip("tokenizers")

AX = "https://github.com/axolotl-ai-cloud/axolotl/blob/main/src/axolotl/utils/schemas"
LF = "https://github.com/hiyouga/LLaMA-Factory/blob/main/src/llamafactory/hparams"

AXOLOTL = f"""\
base_model: meta-llama/Llama-3.2-1B   # {AX}/model.py ModelInputConfig.base_model
adapter: qlora                         # {AX}/peft.py LoraConfig.adapter
load_in_4bit: true                     # {AX}/peft.py LoraConfig.load_in_4bit
lora_r: 32                             # {AX}/peft.py lora_r
lora_alpha: 16                         # {AX}/peft.py lora_alpha
lora_dropout: 0.1                      # {AX}/peft.py lora_dropout
lora_target_modules: [q_proj, v_proj]  # {AX}/peft.py lora_target_modules
sequence_len: 64                       # {AX}/config.py sequence_len
sample_packing: true                   # {AX}/config.py sample_packing
micro_batch_size: 2                    # {AX}/training.py micro_batch_size
gradient_accumulation_steps: 4         # {AX}/training.py gradient_accumulation_steps
num_epochs: 2                          # {AX}/training.py num_epochs
optimizer: paged_adamw_8bit            # {AX}/training.py optimizer
bf16: true                             # {AX}/config.py bf16
gradient_checkpointing: true           # {AX}/config.py gradient_checkpointing
flash_attention: true                  # {AX}/config.py flash_attention
learning_rate: 0.0002                  # {AX}/training.py learning_rate (no effect on cost)
datasets:                              # {AX}/datasets.py SFTDataset.path / type / field
  - path: train.jsonl
    type: completion
    field: text
my_custom_flag: 3                      # not an axolotl key: must be listed
"""

LLAMAFACTORY = f"""\
model_name_or_path: meta-llama/Llama-3.2-1B  # {LF}/model_args.py model_name_or_path
stage: sft                                   # {LF}/finetuning_args.py stage
do_train: true
finetuning_type: lora                        # {LF}/finetuning_args.py finetuning_type
quantization_bit: 4                          # {LF}/model_args.py quantization_bit (QLoRA)
lora_rank: 16                                # {LF}/finetuning_args.py LoraArguments.lora_rank
lora_target: all                             # {LF}/finetuning_args.py lora_target
dataset: mychat                              # {LF}/data_args.py dataset (a name in dataset_info.json)
dataset_dir: data                            # {LF}/data_args.py dataset_dir
template: llama3                             # {LF}/data_args.py template
cutoff_len: 64                               # {LF}/data_args.py cutoff_len
per_device_train_batch_size: 1               # transformers TrainingArguments
gradient_accumulation_steps: 8
num_train_epochs: 3.0
optim: adamw_torch
bf16: true
enable_liger_kernel: true                    # {LF}/model_args.py enable_liger_kernel
flash_attn: sdpa                             # {LF}/model_args.py flash_attn (AttentionFunction)
output_dir: saves/llama3-1b/lora/sft
unheard_of_setting: yes                      # not a LLaMA-Factory key: must be listed
"""

BASE = ("--gpu", "L4,A10G", "--providers", "aws", "--top", "20", "--format", "json")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers

    root = tmp_path_factory.mktemp("configs")
    words = "user assistant hello world how are you fine thanks".split()
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(root / "tokenizer.json"))
    (root / "train.jsonl").write_text("".join(json.dumps({"text": "hello world " * n}) + "\n" for n in range(1, 400)))
    (root / "ax.yaml").write_text(AXOLOTL)
    (root / "lf.yaml").write_text(LLAMAFACTORY)
    (root / "data").mkdir()
    # LLaMA-Factory data/README.md: a sharegpt dataset described in dataset_info.json
    (root / "data" / "dataset_info.json").write_text(json.dumps(
        {"mychat": {"file_name": "chat.json", "formatting": "sharegpt", "columns": {"messages": "conversations"}}}))
    (root / "data" / "chat.json").write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "hello how are you " * n}, {"from": "gpt", "value": "fine thanks"}]}
        for n in range(1, 300)]))
    return root


def _plan(capsys, *args):
    code, out, err = gpu_advisor(capsys, "plan", *args, *BASE)
    assert code == 0, err
    return json.loads(out), err


def test_an_axolotl_config_pins_every_candidate_and_lists_unknown_keys(capsys, tree):
    plan, err = _plan(capsys, "--from-config", tree / "ax.yaml", "--tokenizer", tree / "tokenizer.json")
    assert plan["candidates"]
    for c in plan["candidates"]:
        st = c["stack"]
        assert (st["method"], st["lora_rank"], st["lora_alpha"], st["lora_dropout"]) == ("qlora", 32, 16, 0.1)
        assert (st["lora_targets"], st["optimizer"], st["precision"], st["attention"]) == \
            ("q_proj,v_proj", "paged-adamw-8bit", "bf16", "flash")
        assert st["grad_checkpointing"] is True and st["liger"] is False
        assert c["shape"]["seq_len"] == 64 and c["shape"]["padded"] is False
        assert c["timing"]["global_batch"] == 8  # micro-batch 2 × accumulation 4
    kept = sum(min(2 * n, 64) for n in range(1, 400))  # "hello world" × n: 2n tokens, truncated at 64
    assert plan["workload"]["tokens"] == kept and plan["workload"]["epochs"] == 2
    assert plan["assumptions"]["config_framework"] == "axolotl"
    assert plan["assumptions"]["config_unknown"] == "my_custom_flag"
    assert "learning_rate" in plan["assumptions"]["config_ignored"]
    assert any("my_custom_flag" in w for w in plan["warnings"]) and "my_custom_flag" in err


def test_a_llamafactory_config_pins_every_candidate_and_counts_its_dataset(capsys, tree):
    plan, err = _plan(capsys, "--from-config", tree / "lf.yaml", "--tokenizer", tree / "tokenizer.json")
    assert plan["candidates"]
    for c in plan["candidates"]:
        st = c["stack"]
        # LoraArguments: alpha defaults to 2 × rank, dropout to 0; gradient checkpointing is on unless disabled
        assert (st["method"], st["lora_rank"], st["lora_alpha"], st["lora_dropout"]) == ("qlora", 16, 32, 0.0)
        assert (st["lora_targets"], st["optimizer"], st["precision"], st["attention"]) == \
            ("all-linear", "adamw", "bf16", "sdpa")
        assert st["grad_checkpointing"] is True and st["liger"] is True
        assert c["shape"]["seq_len"] == 64 and c["shape"]["padded"] is True  # no packing: padded batches
    assert plan["workload"]["dataset_rows"] == 299 and plan["workload"]["epochs"] == 3
    assert plan["assumptions"]["config_unknown"] == "unheard_of_setting"
    assert "unheard_of_setting" in err


def test_flags_win_over_the_config(capsys, tree):
    plan, _ = _plan(capsys, "--from-config", tree / "ax.yaml", "--tokenizer", tree / "tokenizer.json",
                    "--lora-rank", "8", "--seq-len", "128", "--tokens", "1M")
    assert {c["stack"]["lora_rank"] for c in plan["candidates"]} == {8}
    assert {c["shape"]["seq_len"] for c in plan["candidates"]} == {128}
    assert plan["workload"]["tokens"] == 1_000_000 and "dataset" not in plan["workload"]


def test_a_trl_json_config_and_a_torchtune_recipe_pin_their_settings(capsys, tree):
    # TRL trl/trainer/sft_config.py + model_config.py; transformers TrainingArguments
    (tree / "trl.json").write_text(json.dumps({
        "model_name_or_path": "meta-llama/Llama-3.2-1B", "use_peft": True, "lora_r": 8, "lora_alpha": 16,
        "lora_target_modules": ["q_proj", "k_proj"], "max_length": 64, "packing": True,
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_train_epochs": 1,
        "optim": "adamw_torch_fused", "use_liger_kernel": True, "attn_implementation": "sdpa",
        "output_dir": "out"}))
    plan, _ = _plan(capsys, "--from-config", tree / "trl.json", "--tokens", "2M")
    for c in plan["candidates"]:
        st = c["stack"]
        assert (st["method"], st["lora_rank"], st["lora_targets"], st["liger"], st["grad_checkpointing"]) == \
            ("lora", 8, "q_proj,k_proj", True, True)  # SFTConfig: gradient_checkpointing defaults to true
    # torchtune recipes/configs/llama3_2/1B_lora_single_device.yaml (https://github.com/pytorch/torchtune)
    (tree / "tt.yaml").write_text(
        "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_attn_modules: ['q_proj', 'v_proj']\n"
        "  lora_rank: 64\n  lora_alpha: 128\n  lora_dropout: 0.0\ntokenizer:\n  _component_: "
        "torchtune.models.llama3.llama3_tokenizer\n  max_seq_len: 128\nbatch_size: 4\nepochs: 1\n"
        "gradient_accumulation_steps: 2\ndtype: bf16\nenable_activation_checkpointing: true\noptimizer:\n"
        "  _component_: torch.optim.AdamW\nloss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n"
        "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n  packed: false\n")
    plan, _ = _plan(capsys, "--from-config", tree / "tt.yaml", "--tokens", "2M")
    assert plan["model"]["name"] == "meta-llama/Llama-3.2-1B"
    for c in plan["candidates"]:
        st = c["stack"]
        assert (st["method"], st["lora_rank"], st["loss"], st["adapter_dtype"], st["liger"]) == \
            ("lora", 64, "chunked", "bf16", False)
        assert c["shape"]["seq_len"] == 128


@pytest.mark.parametrize("text,needle", [
    ("base_model: x\nbf16: true\nfp16: true\n", "contradict"),
    ("base_model: x\nflash_attention: true\nsdp_attention: true\n", "contradict"),
    ("base_model: x\nload_in_4bit: true\n", "needs adapter: qlora"),
    ("finetuning_type: full\nquantization_bit: 4\nmodel_name_or_path: x\n", "contradict"),
    ("base_model: x\nlora_r: many\nadapter: lora\n", "lora_r"),
    ("base_model: x\ndeepspeed: ds.json\nfsdp: [full_shard]\n", "contradict"),
    ("- just\n- a list\n", "mapping"),
    ("colour: blue\n", "not an axolotl"),
    ("base_model: [unclosed\n", "--from-config"),
])
def test_bad_configs_are_one_line_and_exit_2(capsys, tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    code, out, err = gpu_advisor(capsys, "plan", "--from-config", path, "--tokens", "1M", *BASE)
    assert needle in one_line_error(code, err) and out == ""


def test_a_deepspeed_file_named_by_the_config_sets_sharding_and_offload(tmp_path):
    from advisor.workload.training_config import read_config

    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}))
    (tmp_path / "c.yaml").write_text("base_model: x\ndeepspeed: ds.json\n")
    pins = read_config(tmp_path / "c.yaml").options["pins"]
    assert (pins["sharding"], pins["offload"]) == ("zero3", "both")


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi")) + "base_model: x\n"


@pytest.mark.parametrize("text", [BOMB, 'base_model: !!python/object/apply:os.system ["touch PWNED"]\n'])
def test_a_config_is_data_never_code(capsys, tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(text)
    code, out, err = gpu_advisor(capsys, "plan", "--from-config", tmp_path / "c.yaml", "--tokens", "1M", *BASE)
    assert "--from-config" in one_line_error(code, err)
    assert not list(tmp_path.rglob("PWNED"))


def test_hostile_unknown_keys_are_listed_without_reaching_the_terminal_raw(capsys, tmp_path):
    (tmp_path / "c.yaml").write_text('base_model: meta-llama/Llama-3.2-1B\nadapter: lora\n"\\e]0;pwned\\a": 1\n')
    code, out, err = gpu_advisor(capsys, "plan", "--from-config", tmp_path / "c.yaml", "--tokens", "1M", *BASE)
    assert code == 0, err
    assert "\x1b" not in err and "\x07" not in err and "pwned" in err
    assert "pwned" in json.loads(out)["assumptions"]["config_unknown"]


@pytest.mark.parametrize("text,expected", [
    # axolotl loads the weights in the bf16 dtype (src/axolotl/utils/config/__init__.py normalize_config) ...
    ("base_model: x\nbf16: true\n", {"precision": "bf16"}),
    # ... LLaMA-Factory upcasts trainable weights to fp32 unless pure_bf16 (src/llamafactory/model/adapter.py)
    ("model_name_or_path: x\nfinetuning_type: full\nbf16: true\n", {"precision": "amp-bf16"}),
    ("model_name_or_path: x\nfinetuning_type: full\npure_bf16: true\n", {"precision": "bf16"}),
    ("model_name_or_path: x\nfinetuning_type: lora\npure_bf16: true\nadditional_target: embed_tokens,lm_head\n"
     "use_dora: true\nlora_target: q_proj,v_proj\n",
     {"adapter_dtype": "bf16", "modules_to_save": "embed_tokens,lm_head", "dora": True, "lora_targets": "q_proj,v_proj"}),
    ("base_model: x\nadapter: lora\nlora_modules_to_save: [embed_tokens]\npeft_use_dora: true\n",
     {"modules_to_save": "embed_tokens", "dora": True, "lora_rank": 8, "lora_dropout": 0.0}),
    ("model_name_or_path: x\nuse_peft: true\nload_in_4bit: true\nuse_bnb_nested_quant: false\n",
     {"double_quant": False, "lora_rank": 16, "lora_alpha": 32, "lora_dropout": 0.05}),
])
def test_each_frameworks_own_meaning_and_defaults_become_the_pins(tmp_path, text, expected):
    from advisor.workload.training_config import read_config

    (tmp_path / "c.yaml").write_text(text)
    pins = read_config(tmp_path / "c.yaml").options["pins"]
    assert {k: pins.get(k) for k in expected} == expected
