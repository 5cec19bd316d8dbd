"""Host checks: the RAM and vCPUs a node needs to load the model and feed its GPUs, for every candidate.

RAM per node = what loading the checkpoint holds on the host + the offloaded optimizer/parameter
states + each training process's own runtime:

- Loading. transformers loads shard by shard onto the meta device and materialises one
  safetensors shard at a time (`low_cpu_mem_usage`, the default since transformers 4.x and the only
  path in 5.x: modeling_utils `_load_state_dict_into_meta_model`), so an unsharded process (single
  GPU, DDP) holds about one shard: Hub checkpoints are cut at `max_shard_size="5GB"`
  (`PreTrainedModel.save_pretrained`), every process on the node at once. Under FSDP with
  accelerate's `cpu_ram_efficient_loading` (what `launch` writes) and under DeepSpeed ZeRO-3's
  `zero.Init`, only local rank 0 of each node reads the full 16-bit state dict into host RAM and
  the others stay on the meta device until FSDP broadcasts the shards (accelerate
  `utils/fsdp_utils.py` `enable_fsdp_ram_efficient_loading`, transformers PR #25107): one full copy
  of the 16-bit weights per node.
- Offloaded states: the estimator's `cpu_ram_bytes` for the node's ranks, held in at most 90 % of
  the instance's RAM (the rest for the OS and page cache; costing.CPU_RAM_USABLE).
- Runtime: PROCESS_RAM_GB per training process (CUDA context on the host, torch, the tokenised
  dataset's memory map and the dataloader's prefetch; an assumption, stated in the plan). The launch bundle's
  data path (datasets' Arrow cache, TRL's masking and packing, one pass of the dataloader) holds about 60 MiB of
  anonymous memory per rank, flat in the dataset's size: 10x the rows added 4 MiB, measured on the CPU
  (tests/advisor/launch/test_bundle_training.py, test_host_memory_of_the_data_path_does_not_grow_with_the_dataset); the
  tokens themselves stay in memory-mapped files, which the page cache shares between the node's ranks.

vCPUs per node = VCPUS_PER_GPU per GPU: one for the training process, one for its dataloader worker
(Trainer's `dataloader_num_workers` in the bundle `launch` writes; an assumption).
A host whose RAM or vCPUs are not listed passes, and the candidate says so.
"""

from __future__ import annotations

from advisor.stacks import PARAM_SHARDINGS
from advisor.units import GB

SHARD_GB = 5.0  # transformers save_pretrained max_shard_size="5GB": the largest shard one process loads
PROCESS_RAM_GB = 2.0  # per training process: host-side CUDA/torch runtime and dataloader buffers (assumption)
VCPUS_PER_GPU = 2  # the training process and one dataloader worker per GPU (assumption)
RAM_USABLE = 0.9  # share of instance RAM a job may use (OS, page cache)


def sharded_loading(sharding: str) -> bool:
    """FSDP and ZeRO-3 load the full checkpoint on local rank 0 only (cpu_ram_efficient_loading / zero.Init)."""
    return sharding in PARAM_SHARDINGS


def ram_needed_bytes(weights16_bytes: float, gpus_per_node: int, sharding: str, offload_bytes_per_node: float) -> float:
    """Host RAM one node needs for this stack (bytes), by the rule in the module docstring."""
    if sharded_loading(sharding):
        loading = weights16_bytes
    else:
        loading = min(weights16_bytes, SHARD_GB * GB) * gpus_per_node
    return loading + offload_bytes_per_node / RAM_USABLE + PROCESS_RAM_GB * GB * gpus_per_node


def vcpus_needed(gpus_per_node: int) -> int:
    return VCPUS_PER_GPU * gpus_per_node


def check(need_ram, need_vcpus, ram_gb, vcpus):
    """(ram_ok, vcpus_ok, unknown) arrays: the host's RAM (GB, NaN unknown) and vCPUs against the need."""
    import numpy as np

    ram = np.asarray(ram_gb, float) * GB * RAM_USABLE
    cpus = np.asarray(vcpus, float)
    unknown_ram, unknown_cpu = np.isnan(ram), np.isnan(cpus)
    ram_ok = unknown_ram | (np.asarray(need_ram, float) <= ram)
    cpu_ok = unknown_cpu | (np.asarray(need_vcpus, float) <= cpus)
    return ram_ok, cpu_ok, unknown_ram | unknown_cpu


def assumption() -> str:
    return (f"host RAM per node: the 16-bit checkpoint once (FSDP/ZeRO-3 load on local rank 0) or one {SHARD_GB:g} GB "
            f"shard per process, plus offloaded states, plus {PROCESS_RAM_GB:g} GB per process, within "
            f"{RAM_USABLE:.0%} of the RAM; {VCPUS_PER_GPU} vCPUs per GPU (advisor/planner/host.py)")
