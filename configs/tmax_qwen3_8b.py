"""TMAX RL on Qwen3-8B: the Table 13 recipe with Hermes JSON tool calls and a 32768-token response
cap (recipe.md); SFT first with configs/sft_tmax_qwen3_8b.py.

Topology: one host of 8 x H200 (141 GB), colocated (BENCHMARKS "Memory plan of the recipe
configs"): the trainer FSDP over all 8 (32 micro-batches of 8 rows, one 34,816-token row per
device; query-chunked attention), the server 2 replicas x tensor 4 on the same devices, fp32
params (the fp32 LM head of the recipe), 128 slots each (256 concurrent episodes) over a pool of
20,480 pages of 64 tokens. Check another topology with
  python3 -m tmax_jax.plan --config=configs/tmax_qwen3_8b.py --devices=D --device_memory_gb=G
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


def get_config():
  cfg = _base.recipe(preset="qwen3-8b", max_response=32768)
  model = dataclasses.replace(
    cfg.model, overrides={**cfg.model.overrides, "attention_q_chunk": 1024}
  )
  serving = dataclasses.replace(
    cfg.serving, replicas=2, tensor=4, max_concurrent_decodes=128, page_size=64, num_pages=20480
  )
  train = dataclasses.replace(cfg.train, micro_batches=32)  # memory only: same optimizer step
  return to_config_dict(
    dataclasses.replace(cfg, model=model, serving=serving, train=train, mesh=MeshConfig(fsdp=8))
  )
