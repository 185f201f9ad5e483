"""tmax_jax/hlo_cost.py: matmul FLOPs counted through loops; the compiled-FLOP guard of the train
step (bench/compiled_flops.py records the ratios in bench/compiled_flops.json)."""

import dataclasses
import importlib.util
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest

from tmax_jax import hlo_cost
from tmax_jax.models.config import ModelConfig

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


def _bench():
  spec = importlib.util.spec_from_file_location("compiled_flops", BENCH / "compiled_flops.py")
  mod = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = mod
  spec.loader.exec_module(mod)
  return mod


def _compile(f, *shapes):
  return jax.jit(f).lower(*[jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]).compile()


def test_matmul_flops_of_a_plain_dot():
  c = _compile(lambda a, b: a @ b, (32, 48), (48, 16))
  assert hlo_cost.compiled_cost(c).matmul_flops == 2 * 32 * 48 * 16


def test_loops_count_their_trip_count():
  """A scan over 5 matmuls costs 5 matmuls (XLA's own cost analysis counts the body once)."""

  def f(w, x):
    y, _ = jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), x, w)
    return jnp.sum(y)

  c = _compile(f, (5, 64, 64), (8, 64))
  assert hlo_cost.compiled_cost(c).matmul_flops == 5 * 2 * 8 * 64 * 64
  xla = c.cost_analysis()
  xla = xla[0] if isinstance(xla, list) else xla
  assert xla["flops"] < 5 * 2 * 8 * 64 * 64  # why this module exists
  g = _compile(jax.grad(f), (5, 64, 64), (8, 64))  # backward: 2 more matmuls per step
  assert hlo_cost.compiled_cost(g).matmul_flops == 3 * 5 * 2 * 8 * 64 * 64


# XLA:TPU's optimised HLO of a 10-step scan (trimmed from a v5p compile): the loop carries no
# known_trip_count, its condition says `counter < 10`, and the matmul is a `convolution`.
TPU_SCAN = (pathlib.Path(__file__).parent / "data" / "tpu_scan.hlo").read_text()


def test_tpu_loops_count_the_trip_count_their_condition_states():
  """XLA:TPU's HLO has no known_trip_count: the count comes from `counter < N` in the loop's
  condition (scan / fori_loop start at 0 and step by 1), so a scanned model's layers count."""
  assert hlo_cost.hlo_text_cost(TPU_SCAN).matmul_flops == 10 * 2 * 128 * 1024 * 1024
  unknown = TPU_SCAN.replace("direction=LT", "direction=NE")
  with pytest.raises(ValueError, match="no known trip count"):
    hlo_cost.hlo_text_cost(unknown)


@pytest.mark.slow  # test_train_step_flop_ratio_guard is the default guard
def test_scanned_and_unrolled_models_cost_the_same():
  bench = _bench()
  scanned = bench.train_step_cost(bench.model_config(True, "none"), 2, 64, 32)
  cfg = dataclasses.replace(bench.model_config(True, "none"), scan_layers=False)
  unrolled = bench.train_step_cost(cfg, 2, 64, 64)  # one head chunk: no head loop either
  assert scanned["compiled_matmul_flops"] == pytest.approx(
    unrolled["compiled_matmul_flops"], rel=1e-9
  )


def test_train_step_flop_ratio_guard():
  """Compiled / model FLOPs of the Qwen3-1.7B train step (B4 x S4096, default remat policy) may
  not grow by more than 5% past the value recorded in bench/compiled_flops.json."""
  bench = _bench()
  recorded = json.loads((BENCH / "compiled_flops.json").read_text())
  cfg = bench.model_config(False, "none")
  assert cfg.remat_policy == ModelConfig().remat_policy  # "none" is the default policy
  r = bench.train_step_cost(cfg, 4, 4096, 1024)
  assert r["ratio"] <= recorded["train_step:none"] * 1.05, r


@pytest.mark.slow  # imports torch + transformers through model_fwd_bwd.py
def test_hlo_census_of_a_tiny_fwd_bwd(capsys):
  """bench/hlo_census.py sorts every executed instruction into a kind and a model module (from
  the op_name metadata): the projections, attention, MLP and head are all found."""
  sys.path.insert(0, str(BENCH))
  spec = importlib.util.spec_from_file_location("hlo_census", BENCH / "hlo_census.py")
  census = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = census  # its dataclass looks its module up
  spec.loader.exec_module(census)
  s = census.main(
    [
      "--layers",
      "2",
      "--hidden",
      "64",
      "--vocab",
      "256",
      "--batch",
      "2",
      "--seq",
      "32",
      "--chunk",
      "16",
      "--top",
      "5",
    ]
  )
  assert s["matmul_flops"] > 0 and s["by_kind"]["dot"]["count"] > 0
  assert {"attention", "mlp", "head", "qkv_proj", "o_proj"} <= set(s["by_module"])
  assert len(s["top"]) == 5 and "top instructions by bytes" in capsys.readouterr().out
