"""TMAX RL on Qwen3-8B: the Table 13 recipe with Hermes JSON tool calls and a 32768-token response
cap (recipe.md); SFT first with configs/sft_tmax_qwen3_8b.py.

Topology (`topology`, read by python3 -m tmax_jax.plan --config=configs/tmax_qwen3_8b.py): one
host of 8 x H200 (141 GB), colocated (BENCHMARKS "Memory plan of the recipe configs"). Trainer:
FSDP over all 8, no sequence axis (a 34,816-token row fits one device), packed micro-batches of 8
longest rows (one per device; blockwise/cuDNN/splash attention with 1024-token query blocks);
fp32 params (the fp32 LM head of the recipe). Server on the same devices: 2 replicas x tensor 4,
fp32 params, 128 slots each (256 concurrent episodes) over a pool of 20,480 pages of 64 tokens.
Check another topology with --devices=D --device_memory_gb=G.
"""

import dataclasses
import importlib.util
import pathlib

from tmax_jax.config_dict import to_config_dict
from tmax_jax.loop.config import MeshConfig

_spec = importlib.util.spec_from_file_location(
  "tmax_qwen3_5_9b", pathlib.Path(__file__).with_name("tmax_qwen3_5_9b.py")
)
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

SERVING = dict(replicas=2, tensor=4, max_concurrent_decodes=128, page_size=64, num_pages=20480)


def get_config():
  cfg = _base.recipe(preset="qwen3-8b", max_response=32768)
  model = dataclasses.replace(
    cfg.model, overrides={**cfg.model.overrides, "attention_q_chunk": 1024}
  )
  cfg = dataclasses.replace(cfg, model=model)
  return to_config_dict(_base.sized(cfg, _base.H200_X8, MeshConfig(fsdp=8), SERVING, 8))
