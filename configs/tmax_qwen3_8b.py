"""TMAX RL on Qwen3-8B: the Table 13 recipe with Hermes JSON tool calls and a 32768-token response
cap (recipe.md); SFT first with configs/sft_tmax_qwen3_8b.py."""

import importlib.util
import pathlib

from tmax_jax.config_dict import to_config_dict

_spec = importlib.util.spec_from_file_location(
    "tmax_qwen3_5_9b", pathlib.Path(__file__).with_name("tmax_qwen3_5_9b.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)


def get_config():
  return to_config_dict(_base.recipe(preset="qwen3-8b", max_response=32768))
