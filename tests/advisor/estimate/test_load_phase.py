"""The model-loading phase: where every rank holds the whole quantised model before FSDP shards it, loading is
the peak and the fit check uses it; the term is checked against the real fully_shard and transformers' loader."""

from __future__ import annotations

import inspect
import json
import os

import pytest
from click.testing import CliRunner
from helpers.cli_run import gpu_advisor, one_line_error

from advisor.api import estimate_memory
from advisor.estimate.phases import CHECKPOINT, LOAD, OPTIMIZER_STEP, STEP, fsdp_load_bytes
from advisor.model.catalog import load_model
from advisor.model.release import parse
from advisor.stacks import Shape, Stack
from cli import cli

SEVENTY = "meta-llama/Llama-2-70b-hf"
SHAPE = Shape(micro_batch=2, seq_len=2048)


def qlora(**kw) -> Stack:
    return Stack(**{"method": "qlora", "lora_rank": 8, "grad_checkpointing": True, "attention": "flash", "gpus": 2,
                    "sharding": "fsdp", **kw})


def test_every_estimate_names_four_phases_and_its_peak_is_the_largest():
    for stack in (qlora(), qlora(offload="both"), qlora(gpus=1, sharding="none"), Stack(method="lora"),
                  Stack(method="full", gpus=8, sharding="fsdp")):
        est = estimate_memory(SEVENTY, stack, SHAPE)
        assert list(est.phases) == [LOAD, STEP, OPTIMIZER_STEP, CHECKPOINT]
        assert est.device_total == max(p.total for p in est.phases.values()) == est.phases[est.peak_phase].total
        assert est.load is not None and est.load.source


def test_qlora_under_fsdp_peaks_at_loading_with_the_bundles_transformers():
    est = estimate_memory(SEVENTY, qlora(), SHAPE)
    whole = estimate_memory(SEVENTY, qlora(gpus=1, sharding="none"), SHAPE).phases[STEP].weights
    assert est.peak_phase == LOAD and est.breakdown is not est.phases[STEP]
    # the whole model (NF4, 16-bit rest, adapters) and half of it again as this rank's shards
    assert est.load.bytes == fsdp_load_bytes(whole, 2, offload=False) == whole + whole // 2
    offloaded = estimate_memory(SEVENTY, qlora(offload="params"), SHAPE)
    assert offloaded.load.bytes == whole and offloaded.peak_phase == LOAD
    zero3 = estimate_memory(SEVENTY, qlora(sharding="zero3", optimizer="adamw-fp32"), SHAPE)
    assert zero3.load.bytes == whole and zero3.peak_phase == LOAD
    assert "model loading" in est.assumptions["peak_phase"] and est.assumptions["step_peak_phase"]


def test_the_fit_check_uses_the_loading_peak():
    """Two 24 GB cards hold the 70B QLoRA step with offload, not the whole quantised model each rank loads."""
    est = estimate_memory(SEVENTY, qlora(offload="both"), SHAPE, gpu="RTX4090")
    assert est.phases[STEP].total < est.fit.usable_bytes * 0.9 < est.device_total
    assert not est.fit.fits and est.fit.max_micro_batch == 0
    roomy = estimate_memory(SEVENTY, qlora(offload="both"), SHAPE, gpu="A6000")
    assert roomy.fit.fits and roomy.peak_phase == LOAD


def test_transformers_4_stages_quantised_layers_on_the_cpu_so_the_step_is_the_peak():
    old = parse("4.46")
    est = estimate_memory(SEVENTY, qlora(offload="both"), SHAPE, transformers=old)
    assert est.peak_phase == STEP and est.device_total == est.phases[STEP].total
    assert "29587" in est.load.source and est.assumptions["transformers"].startswith("4.46.0")


def test_the_step_is_the_peak_where_no_rank_holds_the_whole_model():
    for stack in (Stack(method="lora"), qlora(gpus=1, sharding="none"), Stack(method="full", gpus=8, sharding="fsdp"),
                  qlora(sharding="ddp")):
        est = estimate_memory("meta-llama/Llama-3.1-8B", stack, SHAPE)
        assert est.peak_phase == STEP and est.breakdown == est.phases[STEP]
        assert est.phases[OPTIMIZER_STEP].total <= est.phases[STEP].total
        assert est.phases[CHECKPOINT].total <= est.phases[OPTIMIZER_STEP].total


def test_a_replayed_step_keeps_the_loading_peak():
    from advisor.estimate.alloc_trace import parse_lengths

    est = estimate_memory(SEVENTY, qlora(), SHAPE, lengths=parse_lengths("900,400,2048"))
    assert est.peak_phase == LOAD and est.reserved is not None
    assert est.phases[STEP].total == est.reserved.needed + 512 * 2**20
    assert est.device_total == est.phases[LOAD].total > est.phases[STEP].total


def test_estimate_json_and_table_show_the_phases():
    args = ["estimate", SEVENTY, "--method", "qlora", "--lora-rank", "8", "--gpus", "2", "--sharding", "fsdp",
            "--grad-checkpointing", "--attention", "flash", "--batch-size", "2"]
    r = CliRunner().invoke(cli, [*args, "--format", "json"], catch_exceptions=False)
    d = json.loads(r.stdout)
    assert d["peak_phase"] == LOAD and d["load"]["source"] and set(d["phases"]) == {LOAD, STEP, OPTIMIZER_STEP,
                                                                                   CHECKPOINT}
    assert d["breakdown"]["total"] == d["device_total"] == d["phases"][LOAD]["total"]
    table = CliRunner().invoke(cli, args, catch_exceptions=False).stdout
    assert f"peak: {LOAD}" in table and "total (training step)" in table
    old = CliRunner().invoke(cli, [*args, "--transformers-version", "4.46", "--format", "json"],
                             catch_exceptions=False)
    assert json.loads(old.stdout)["peak_phase"] == STEP


@pytest.mark.parametrize("bad", ["4.2", "five", "5.24.0rc1", "-1", "5." + "9" * 400])
def test_a_release_we_do_not_model_is_one_line_and_exit_2(capsys, bad):
    code, _, err = gpu_advisor(capsys, "estimate", SEVENTY, "--transformers-version", bad)
    assert "--transformers-version" in one_line_error(code, err) and len(err) < 300


def test_gemma2_defaults_to_the_attention_of_the_release_assumed():
    from advisor.model.architecture import default_attention, supported_attention

    family = load_model("google/gemma-2-9b").family
    assert default_attention(family) == "eager" and "sdpa" not in supported_attention(family)
    assert default_attention(family, parse("4.46")) == "sdpa" and "sdpa" in supported_attention(family, parse("4.46"))
    r = CliRunner().invoke(cli, ["estimate", "google/gemma-2-9b", "--transformers-version", "4.46", "--format", "json"],
                           catch_exceptions=False)
    assert json.loads(r.stdout)["stack"]["attention"] == "sdpa"


# ------------------------------------------------------------------ the real libraries


def test_transformers_bnb_loader_places_the_whole_model_on_this_rank_s_one_device():
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.quantizer_bnb_4bit import Bnb4BitHfQuantizer

    mapping = Bnb4BitHfQuantizer(BitsAndBytesConfig(load_in_4bit=True)).update_device_map(None)
    assert list(mapping) == [""]  # one device for every module: the current CUDA device on a GPU rank


def test_accelerate_keeps_a_params4bit_model_whole_on_the_gpu_while_it_shards():
    """The branch the term models: a Params4bit model skips the move to meta, and the original state dict stays
    referenced across fully_shard (accelerate's own code path, read where it runs)."""
    from accelerate.utils import fsdp_utils

    src = inspect.getsource(fsdp_utils.fsdp2_prepare_model)
    assert "cpu_ram_efficient_loading and not model_has_params4bit" in src
    assert src.index("original_sd = model.state_dict()") < src.index("fully_shard(model")


def _shard(rank: int, ranks: int, port: int, out) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    try:
        mesh = init_device_mesh("cpu", (ranks,))
        model = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False), torch.nn.Linear(64, 32, bias=False))
        original = model.state_dict()  # what accelerate holds across fully_shard
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        ptrs = {t.untyped_storage().data_ptr() for t in original.values()}
        local = [p.to_local() for p in model.parameters()]
        out.put((sum(t.nbytes for t in original.values()), sum(t.nbytes for t in local),
                 any(t.untyped_storage().data_ptr() in ptrs for t in local)))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_fully_shard_allocates_new_shards_beside_the_whole_model():
    """Real FSDP2 on two CPU ranks: the shards are new storage, 1/n of the model, so while the originals are
    referenced each rank holds whole + whole/n: the bytes fsdp_load_bytes counts."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out, port = ctx.Queue(), _free_port()
    procs = [ctx.Process(target=_shard, args=(r, 2, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    for whole, shard, aliased in results:
        assert not aliased and shard == whole // 2
        assert whole + shard == fsdp_load_bytes(whole, 2, offload=False)
