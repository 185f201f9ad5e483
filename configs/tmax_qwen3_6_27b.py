"""TMAX RL on Qwen3.6-27B (the Qwen3.5 hybrid architecture and 248k vocabulary at 27B): the Table 13
recipe with XML tool calls.

Topology (`topology`, read by python3 -m tmax_jax.plan --config=configs/tmax_qwen3_6_27b.py): four
hosts of 8 x H200 (141 GB; 32 devices, 4 processes), colocated (BENCHMARKS "Memory plan of the
recipe configs"; 16 x H200 plans to 149.5 GB per device). Trainer: fsdp 4 (one per host) x
sequence 8 (context parallel within a host; params and Adam state split over all 32 by the
CONTEXT_PARALLEL_RULES). Multi-process RL takes fixed rows (loop/rl.py refuses packing there), so
the 256 trajectories go in 64 micro-batches of 4 rows (one 67,584-token row per fsdp shard: 8,448
tokens per device). Server: on each host 2 replicas x tensor 4 (8 replicas x 32 slots = the 256
concurrent episodes), bf16 params with the fp32 head, 12,500 pages of 64 tokens per replica (what
32 episodes hold at a 16k mean in-flight context, bench/serving_memory.py).
"""

import dataclasses
import importlib.util
import pathlib

from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import MeshConfig, TopologyConfig
from tmax_jax.train.config import PackingConfig

_spec = importlib.util.spec_from_file_location(
  "tmax_qwen3_5_9b", pathlib.Path(__file__).with_name("tmax_qwen3_5_9b.py")
)
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

H200_X32 = TopologyConfig(
  name="32 x H200 (141 GB), four hosts of 8", devices=32, device_memory_gb=141.0, processes=4
)
SERVING = dict(_base.SERVING_9B, max_concurrent_decodes=32, num_pages=12500)


def get_config():
  cfg = _base.sized(
    _base.recipe(preset="qwen3.5-27b"), H200_X32, MeshConfig(fsdp=4, sequence=8), SERVING, 4
  )
  # fixed rows (multi-process): memory only, the optimizer step is the same
  train = dataclasses.replace(cfg.train, packing=PackingConfig(), micro_batches=64)
  return to_config_dict(dataclasses.replace(cfg, train=train))
