"""TMAX RL on Qwen3.6-27B (the Qwen3.5 hybrid architecture and 248k vocabulary at 27B): the Table 13
recipe with XML tool calls."""

import importlib.util
import pathlib

from tmax_jax.config_dict import to_config_dict

_spec = importlib.util.spec_from_file_location(
  "tmax_qwen3_5_9b", pathlib.Path(__file__).with_name("tmax_qwen3_5_9b.py")
)
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)


def get_config():
  return to_config_dict(_base.recipe(preset="qwen3.5-27b"))
