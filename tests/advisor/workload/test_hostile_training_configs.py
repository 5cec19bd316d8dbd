"""Hostile training configs for `plan --from-config` (issue 38): every value is typed before it becomes a plan
option, so a wrong type is one line naming the config key (exit 2), never a silent default, a guess or a
message about an option the user never passed (--sharding, --seq-len); a file the config refers to
(DeepSpeed JSON, dataset_info.json, a dataset) that is there but is not a regular file is refused, never
guessed from its name or passed over."""

from __future__ import annotations

import json
import os
import sys

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from pricing import files

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")
AXOLOTL = "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nsequence_len: 512\n"
LLAMA_FACTORY = ("model_name_or_path: meta-llama/Llama-3.2-1B\nfinetuning_type: lora\ncutoff_len: 512\n"
                 "dataset: mine\ndataset_dir: data\n")
TORCHTUNE = ("model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_rank: 8\n"
             "tokenizer:\n  _component_: torchtune.models.llama3.llama3_tokenizer\n  max_seq_len: 128\n"
             "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture()
def counted():
    start = files.BYTES_READ[0]
    return lambda: files.BYTES_READ[0] - start


def refused(capsys, config, *words: str, name: str = "train.yaml") -> str:
    """`plan --from-config` of `config` (text, written next to its files): one line, exit 2, naming `words`."""
    path = config.parent / name if hasattr(config, "parent") else None
    code, out, err = gpu_advisor(capsys, "plan", "--from-config", path or config, "--tokens", "1M", "--gpu", "L4",
                                 "--providers", "aws", "--format", "json")
    line = one_line_error(code, err)
    for w in words:
        assert w in line, line
    assert "--sharding" not in line and "--seq-len" not in line and "internal error" not in line, line
    assert out == ""
    return line


def config(tmp_path, text: str, name: str = "train.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def with_deepspeed(tmp_path, ds, text: str = AXOLOTL, name: str = "ds.json"):
    """An axolotl config whose `deepspeed` names `name`, written as JSON `ds` (or left to the caller: None)."""
    if ds is not None:
        (tmp_path / name).write_text(ds if isinstance(ds, str) else json.dumps(ds))
    return config(tmp_path, text + f"deepspeed: {name}\n")


def pins_of(path):
    from advisor.workload.training_config import read_config

    return read_config(path)


# --------------------------------------------------------------------------- DeepSpeed JSON
@pytest.mark.parametrize("ds,words", [
    ("[1, 2]", ("expected a JSON object", "a list")),
    ('"zero3"', ("expected a JSON object",)),
    ({"zero_optimization": {"stage": 3.0}}, ("zero_optimization.stage", "3.0")),
    ({"zero_optimization": {"stage": True}}, ("zero_optimization.stage", "True")),
    ({"zero_optimization": {"stage": "3"}}, ("zero_optimization.stage",)),
    ({"zero_optimization": {"stage": 4}}, ("zero_optimization.stage", "0, 1, 2 or 3")),
    ({"zero_optimization": "stage3"}, ("zero_optimization: expected a mapping",)),
    ({"zero_optimization": [3]}, ("zero_optimization: expected a mapping",)),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": ["cpu"]}}},
     ("zero_optimization.offload_optimizer.device", "cpu, nvme")),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "gpu"}}},
     ("zero_optimization.offload_optimizer.device", "'gpu'")),
    ({"zero_optimization": {"stage": 3, "offload_param": "cpu"}}, ("zero_optimization.offload_param: expected a mapping",)),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": ["cpu"]}},
     ("zero_optimization.offload_optimizer: expected a mapping",)),
])
def test_a_mistyped_deepspeed_json_names_its_key(capsys, tmp_path, ds, words):
    refused(capsys, with_deepspeed(tmp_path, ds), "ds.json", *words)


def test_an_inline_deepspeed_mapping_is_typed_the_same(capsys, tmp_path):
    path = config(tmp_path, json.dumps({"model_name_or_path": "meta-llama/Llama-3.2-1B", "use_peft": True,
                                        "deepspeed": {"zero_optimization": {"stage": True}}}), "args.json")
    refused(capsys, path, "deepspeed", "zero_optimization.stage", name="args.json")


def test_deepspeed_that_is_neither_a_file_name_nor_a_mapping_is_named(capsys, tmp_path):
    refused(capsys, config(tmp_path, AXOLOTL + "deepspeed: 5\n"), "deepspeed: expected a DeepSpeed JSON")


@pytest.mark.parametrize("make,words", [
    ("fifo", ("FIFO", "not a regular file")), ("zero", ("character device", "not a regular file")),
    ("loop", ("symbolic link loop",)), ("folder", ("folder", "not a regular file"))])
def test_a_deepspeed_reference_that_is_not_a_regular_file_is_refused_not_guessed(capsys, tmp_path, counted, make,
                                                                                  words):
    name = "zero3_bf16_cpuoffload_params.json"  # its name alone would say ZeRO-3 with offload
    path = tmp_path / name
    if make == "fifo":
        os.mkfifo(path)
    elif make == "zero":
        path.symlink_to("/dev/zero")
    elif make == "loop":
        path.symlink_to(path)
    else:
        path.mkdir()
    line = refused(capsys, with_deepspeed(tmp_path, None, name=name), name, *words)
    assert "its name says" not in line
    assert counted() <= (tmp_path / "train.yaml").stat().st_size  # the config alone was read


def test_a_deepspeed_file_that_is_not_here_is_still_read_from_its_name(tmp_path):
    cfg = pins_of(with_deepspeed(tmp_path, None, name="zero3_bf16_cpuoffload_params.json"))
    assert (cfg.options["pins"]["sharding"], cfg.options["pins"]["offload"]) == ("zero3", "params")
    assert any("its name says ZeRO stage 3" in n for n in cfg.notes)


@pytest.mark.parametrize("device,offload", [("none", None), ("nvme", "optimizer"), ("CPU", "optimizer"), (None, None)])
def test_deepspeeds_own_offload_devices_are_read(tmp_path, device, offload):
    cfg = pins_of(with_deepspeed(tmp_path, {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": device}}}))
    assert cfg.options["pins"]["sharding"] == "zero2" and cfg.options["pins"].get("offload") == offload


# --------------------------------------------------------------------------- axolotl
@pytest.mark.parametrize("value,got", [("5", "'5'"), ("[a.jsonl]", "a list"), ("{file: a.jsonl}", "a mapping"),
                                       ("true", "'True'"), ("''", "''")])
def test_an_axolotl_dataset_path_that_is_not_text_is_named(capsys, tmp_path, value, got):
    refused(capsys, config(tmp_path, AXOLOTL + f"datasets:\n  - path: {value}\n    type: completion\n"),
            "datasets[0].path", got)


@pytest.mark.parametrize("value,key", [
    ("data.jsonl", "datasets: expected a list"), ("{path: a.jsonl}", "datasets: expected a list"),
    ("[a.jsonl]", "datasets: expected a list"),
    ("[{path: a.jsonl, type: 5}]", "datasets[0].type"),
    ("[{path: a.jsonl, type: chat_template, field_messages: [m]}]", "datasets[0].field_messages"),
    ("[{path: a.jsonl, type: completion, field: 5}]", "datasets[0].field")])
def test_axolotl_datasets_of_the_wrong_shape_are_named(capsys, tmp_path, value, key):
    refused(capsys, config(tmp_path, AXOLOTL + f"datasets: {value}\n"), key)


@pytest.mark.parametrize("make,words", [("fifo", ("FIFO", "not a regular file")),
                                        ("zero", ("character device",)), ("loop", ("symbolic link loop",))])
def test_an_axolotl_dataset_that_is_not_a_regular_file_is_refused_naming_the_config(capsys, tmp_path, counted, make,
                                                                                     words):
    path = tmp_path / "data.jsonl"
    {"fifo": lambda: os.mkfifo(path), "zero": lambda: path.symlink_to("/dev/zero"),
     "loop": lambda: path.symlink_to(path)}[make]()
    refused(capsys, config(tmp_path, AXOLOTL + "datasets:\n  - path: data.jsonl\n    type: completion\n"),
            "train.yaml", "data.jsonl", *words)
    assert counted() <= (tmp_path / "train.yaml").stat().st_size  # the config alone was read


@pytest.mark.parametrize("line,key", [
    ("sequence_len: 99999999999", "sequence_len"), ("sequence_len: true", "sequence_len"),
    ("micro_batch_size: 0", "micro_batch_size"), ("micro_batch_size: 2.5", "micro_batch_size"),
    ("gradient_accumulation_steps: 1e12", "gradient_accumulation_steps"), ("num_epochs: .nan", "num_epochs"),
    ("num_epochs: 1e9", "num_epochs"), ("lora_r: true", "lora_r"), ("lora_r: 100000", "lora_r"),
    ("lora_dropout: 1.5", "lora_dropout"), ("lora_dropout: -0.1", "lora_dropout"), ("lora_alpha: [16]", "lora_alpha"),
    ("lora_target_modules: ['q_proj; rm -rf /']", "lora_target_modules"),
    ("lora_target_modules: [1, 2]", "lora_target_modules"),
    ("fsdp: 5", "fsdp"), ("fsdp: [1]", "fsdp"), ("fsdp_config: [offload]", "fsdp_config"),
    ("fsdp: [full_shard]\nfsdp_config: {fsdp_offload_params: 'yes'}", "fsdp_config.fsdp_offload_params"),
    ("gradient_checkpointing: true\nbf16: maybe", "bf16"),
])
def test_an_axolotl_value_of_the_wrong_type_or_size_names_its_key(capsys, tmp_path, line, key):
    refused(capsys, config(tmp_path, AXOLOTL + line + "\n"), key)


# --------------------------------------------------------------------------- LLaMA-Factory
def lf(tmp_path, info) -> object:
    (tmp_path / "data").mkdir(exist_ok=True)
    if info is not None:
        (tmp_path / "data" / "dataset_info.json").write_text(info if isinstance(info, str) else json.dumps(info))
    return config(tmp_path, LLAMA_FACTORY)


@pytest.mark.parametrize("info,words", [
    ([{"mine": {"file_name": "a.json"}}], ("dataset_info.json", "expected a mapping of dataset names")),
    ({"mine": "a.json"}, ("dataset_info.json", "mine: expected a mapping")),
    ({"mine": {"file_name": ["a.json", "b.json"]}}, ("mine.file_name", "a list")),
    ({"mine": {"file_name": 5}}, ("mine.file_name", "'5'")),
    ({"mine": {"file_name": "a.json", "columns": ["prompt", "response"]}}, ("mine.columns", "a list")),
    ({"mine": {"file_name": "a.json", "columns": {"messages": 5}}}, ("mine.columns.messages",)),
    ({"mine": {"file_name": "a.json", "formatting": ["sharegpt"]}}, ("mine.formatting",)),
])
def test_a_mistyped_dataset_info_json_names_the_entry_and_key(capsys, tmp_path, info, words):
    refused(capsys, lf(tmp_path, info), *words)


@pytest.mark.parametrize("make,words", [("fifo", ("FIFO",)), ("zero", ("character device",)),
                                        ("folder", ("folder",)), ("loop", ("symbolic link loop",))])
def test_a_dataset_info_json_that_is_not_a_regular_file_is_refused_not_passed_over(capsys, tmp_path, counted, make,
                                                                                   words):
    path = lf(tmp_path, None).parent / "data" / "dataset_info.json"
    {"fifo": lambda: os.mkfifo(path), "zero": lambda: path.symlink_to("/dev/zero"), "folder": lambda: path.mkdir(),
     "loop": lambda: path.symlink_to(path)}[make]()
    refused(capsys, tmp_path / "train.yaml", "dataset_info.json", "not a regular file", *words)
    assert counted() <= (tmp_path / "train.yaml").stat().st_size


def test_a_well_formed_dataset_info_json_still_finds_its_file(tmp_path):
    path = lf(tmp_path, {"mine": {"file_name": "a.json", "formatting": "sharegpt", "columns": {"messages": "conv"}}})
    (tmp_path / "data" / "a.json").write_text("[]")
    cfg = pins_of(path)
    assert (cfg.dataset, cfg.messages_field) == (str(tmp_path / "data" / "a.json"), "conv")


# --------------------------------------------------------------------------- torchtune and TRL
@pytest.mark.parametrize("change,key", [
    ("  lora_attn_modules: 5\n", "model.lora_attn_modules"),
    ("  lora_attn_modules: [1, 2]\n", "model.lora_attn_modules"),
    ("  lora_attn_modules: q_proj\n", "model.lora_attn_modules"),
    ("  lora_rank: true\n", "model.lora_rank"),
    ("  lora_dropout: [0.1]\n", "model.lora_dropout"),
    ("  apply_lora_to_mlp: 'yes'\n", "model.apply_lora_to_mlp"),
])
def test_a_mistyped_torchtune_model_section_names_its_key(capsys, tmp_path, change, key):
    text = TORCHTUNE.replace("  lora_rank: 8\n", change if "lora_rank" in change else "  lora_rank: 8\n" + change)
    refused(capsys, config(tmp_path, text), key)


@pytest.mark.parametrize("old,new,key", [
    ("  max_seq_len: 128\n", "  max_seq_len: '128'\n", "tokenizer.max_seq_len"),
    ("  max_seq_len: 128\n", "  max_seq_len: 99999999999\n", "tokenizer.max_seq_len"),
    ("dataset:\n", "optimizer: {_component_: 5}\ndataset:\n", "optimizer._component_"),
    ("dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n",
     "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n  packed: 'yes'\n", "dataset.packed"),
    ("dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n",
     "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n  data_files: 5\n", "dataset.data_files"),
])
def test_a_mistyped_torchtune_section_names_its_key(capsys, tmp_path, old, new, key):
    refused(capsys, config(tmp_path, TORCHTUNE.replace(old, new)), key)


@pytest.mark.parametrize("extra,key", [
    ({"model_init_kwargs": [1]}, "model_init_kwargs"), ({"model_init_kwargs": {"dtype": 5}}, "model_init_kwargs.dtype"),
    ({"model_init_kwargs": {"attn_implementation": ["sdpa"]}}, "model_init_kwargs.attn_implementation"),
    ({"per_device_train_batch_size": 10**9}, "per_device_train_batch_size"), ({"max_length": "long"}, "max_length"),
    ({"fsdp": "full_shard", "fsdp_config": {"offload_params": "true"}}, "fsdp_config.offload_params"),
])
def test_a_mistyped_trl_config_names_its_key(capsys, tmp_path, extra, key):
    text = json.dumps({"model_name_or_path": "meta-llama/Llama-3.2-1B", "use_peft": True, **extra})
    refused(capsys, config(tmp_path, text, "args.json"), key, name="args.json")


def test_well_typed_configs_of_every_framework_still_read(tmp_path):
    assert pins_of(config(tmp_path, TORCHTUNE)).options["seq_len"] == 128
    ax = pins_of(config(tmp_path, AXOLOTL + "lora_dropout: 5e-2\nfsdp: true\n", "ax.yaml"))
    assert ax.options["pins"]["lora_dropout"] == 0.05 and ax.options["pins"]["sharding"] == "fsdp"


@pytest.mark.parametrize("make,words", [("fifo", "FIFO"), ("zero", "character device"), ("loop", "symbolic link loop")])
def test_a_config_that_is_not_a_regular_file_is_refused_before_it_is_read(capsys, tmp_path, counted, make, words):
    path = tmp_path / "train.yaml"
    {"fifo": lambda: os.mkfifo(path), "zero": lambda: path.symlink_to("/dev/zero"),
     "loop": lambda: path.symlink_to(path)}[make]()
    line = refused(capsys, path, "--from-config", words)
    assert str(path) in line and counted() == 0
