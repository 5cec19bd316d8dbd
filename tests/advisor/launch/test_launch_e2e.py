"""A generated bundle trains for real: `accelerate launch --config_file` on the CPU, tiny random Llama, loss goes down."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import textwrap
import warnings
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from helpers.launch_fixtures import TINY_LLAMA, candidate, spec, write_tiny_llama

from advisor.launch.bundle import LaunchWarning, build_bundle, write_bundle

pytestmark = pytest.mark.slow

WORDS = "the quick brown fox jumps over the lazy dog while a small cat sleeps in the warm sun".split()


def make_bundle(tmp_path: Path, stack: dict | None = None, **overrides) -> Path:
    c = candidate(gpu_count=1, nodes=1, sharding="none", seq_len=64, micro_batch=4, grad_accum=1, **overrides)
    if stack:  # technique switches the flat candidate() fixture does not name
        c = c.model_copy(update={"stack": c.stack.model_copy(update=stack)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LaunchWarning)
        out = write_bundle(build_bundle(c, spec("llama"), dataset="data/train.jsonl"), tmp_path / "bundle")
    rng = random.Random(0)
    (out / "data").mkdir()
    with open(out / "data" / "train.jsonl", "w", encoding="utf-8") as fh:
        for _ in range(60):
            fh.write(json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(30))}) + "\n")
    return out


# Written as sitecustomize.py on the run's PYTHONPATH, for every Python process of the run (accelerate's launcher
# and train.py): the stack packages the bundle does not pin are hidden (sys.modules[name] = None: `import` fails
# and importlib.util.find_spec says "not installed", which is how transformers and accelerate probe for them), so
# the run has exactly requirements.txt's packages; at exit each process writes its argv[0] and the top-level
# modules it imported.
CENSUS = textwrap.dedent("""
    import atexit, json, os, sys

    for _name in filter(None, os.environ["HIDE_MODULES"].split(",")):
        sys.modules[_name] = None

    def _write():
        path = os.path.join(os.environ["IMPORT_CENSUS_DIR"], f"{os.getpid()}.json")
        with open(path, "w") as f:
            loaded = {m.split(".")[0] for m, module in list(sys.modules.items()) if module is not None}
            json.dump({"argv0": sys.argv[0], "modules": sorted(loaded)}, f)

    atexit.register(_write)
""")
VERSIONS = Path(__file__).parents[3] / "advisor" / "launch" / "templates" / "versions.json"


def train(out: Path, tmp_path: Path, lr: float, expect: tuple[str, ...] = ()) -> list[float]:
    """20 steps through `accelerate launch`; then the pins are checked against what train.py imported."""
    accelerate = shutil.which("accelerate") or pytest.skip("accelerate CLI not on PATH")
    config = write_tiny_llama(tmp_path / "tiny")
    census = tmp_path / "census"
    census.mkdir()
    (census / "sitecustomize.py").write_text(CENSUS)
    env = {**os.environ, "IMPORT_CENSUS_DIR": str(census), "HIDE_MODULES": ",".join(unpinned_modules(out)),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(census), os.environ.get("PYTHONPATH")]))}
    cmd = [accelerate, "launch", "--config_file", str(out / "accelerate_config.yaml"), str(out / "train.py"),
           "--config", str(out / "training_args.yaml"), "--init_from_config", str(config),
           "--max_steps", "20", "--logging_steps", "1", "--learning_rate", str(lr),
           "--output_dir", str(tmp_path / "run")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    losses = [float(x) for x in re.findall(r"^step=\d+ loss=([0-9.]+)$", proc.stdout, re.M)]
    assert len(losses) == 20, proc.stdout[-2000:]
    assert "peak_memory" in proc.stdout
    for text in expect:
        assert text in proc.stdout, proc.stdout[-2000:]
    assert_pinned_versions_ran(out, census)
    return losses


MODULES = {"torch": "torch", "transformers": "transformers", "trl": "trl", "datasets": "datasets", "peft": "peft",
           "accelerate": "accelerate",
           "pyyaml": "yaml", "deepspeed": "deepspeed", "bitsandbytes": "bitsandbytes", "liger-kernel": "liger_kernel",
           "flash-attn": "flash_attn",
           "vllm": "vllm"}  # stack package (versions.json) -> its import name


def unpinned_modules(out: Path) -> list[str]:
    """Import names of the stack packages this bundle's requirements.txt does not pin."""
    table = json.loads(VERSIONS.read_text())["packages"]
    assert set(table) == set(MODULES)
    pinned = {line.split("==")[0] for line in (out / "requirements.txt").read_text().split()}
    return sorted(MODULES[p] for p in table if p not in pinned)


def assert_pinned_versions_ran(out: Path, census: Path) -> None:
    """requirements.txt names every stack package (advisor/launch/templates/versions.json) that train.py imported
    (the unpinned ones were hidden, so the run had only the pinned ones), each at the version installed here,
    whatever release the index served (the pin records what the bundle was validated with; the run checks that
    today's release still trains with the bundle's files)."""
    table = json.loads(VERSIONS.read_text())
    pins = dict(line.split("==") for line in (out / "requirements.txt").read_text().split())
    assert all(pins[p] == table["packages"][p] for p in pins), pins
    runs = [json.loads(f.read_text()) for f in census.glob("*.json")]
    mine = [r for r in runs if r["argv0"].endswith("train.py")]
    assert mine, f"no import census from train.py: {[r['argv0'] for r in runs]}"
    used = {p for p, module in MODULES.items() if module in mine[0]["modules"]}
    assert {"torch", "transformers", "trl", "datasets", "accelerate", "pyyaml"} <= used, used  # the census saw the run
    assert used <= set(pins), f"imported but not in requirements.txt: {sorted(used - set(pins))}"
    for package in used:
        assert package in table["tested_on_cpu"], package
        assert metadata.version(package), package  # the run imported an installed release of it


def test_full_fine_tune_bundle_runs_and_loss_goes_down(tmp_path):
    out = make_bundle(tmp_path, method="full", precision="fp32", optimizer="adamw", grad_checkpointing=False)
    assert yaml.safe_load((out / "accelerate_config.yaml").read_text())["distributed_type"] == "NO"
    losses = train(out, tmp_path, lr=3e-3)
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < first - 0.5, losses  # random init starts near ln(vocab) = ln(320) = 5.8
    assert (tmp_path / "run" / "model.safetensors").exists()


def test_lora_bundle_with_checkpointing_in_bf16_runs_and_loss_goes_down(tmp_path):
    out = make_bundle(tmp_path, method="lora", lora_rank=8, precision="bf16", optimizer="adamw",
                      grad_checkpointing=True)
    args = yaml.safe_load((out / "training_args.yaml").read_text())
    assert args["lora"]["r"] == 8 and args["training"]["activation_checkpointing"] is True
    losses = train(out, tmp_path, lr=1e-2)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.2, losses
    adapter = json.loads((tmp_path / "run" / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and TINY_LLAMA["model_type"] == "llama"


def test_dora_with_trained_embeddings_and_lm_head_and_chunked_loss_trains(tmp_path):
    """DoRA (use_dora), modules_to_save (trainable embed_tokens and lm_head copies) and a chunked loss (TRL's own
    fused LM head, which projects through the trained lm_head copy), as the bundle writes them, through accelerate
    on the CPU."""
    out = make_bundle(tmp_path, method="lora", lora_rank=8, precision="fp32", optimizer="adamw",
                      grad_checkpointing=False,
                      stack={"dora": True, "modules_to_save": "embed_tokens,lm_head", "lora_targets": "q_proj,v_proj",
                             "loss": "chunked"})
    args = yaml.safe_load((out / "training_args.yaml").read_text())
    assert args["lora"]["use_dora"] is True and args["lora"]["modules_to_save"] == ["embed_tokens", "lm_head"]
    assert "TRL fused LM head" in args["estimate"]["loss"]
    losses = train(out, tmp_path, lr=1e-2)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.2, losses
    adapter = json.loads((tmp_path / "run" / "adapter_config.json").read_text())
    assert adapter["use_dora"] is True and set(adapter["modules_to_save"]) == {"embed_tokens", "lm_head"}
    assert set(adapter["target_modules"]) == {"q_proj", "v_proj"}

