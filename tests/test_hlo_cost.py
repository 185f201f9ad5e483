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


# One layer's matmuls of serve_tiny's decode as XLA:TPU compiles them (trimmed from its v5p HLO):
# q_proj and o_proj as convolutions whose window taps partly hit padding, and the batched q.K^T and
# P.V over the paged cache as lhs-dilated convolutions (one real tap in each 8 x 2 window).
TPU_DECODE = (pathlib.Path(__file__).parent / "data" / "tpu_decode_attention.hlo").read_text()


def test_tpu_decode_attention_counts_its_real_taps():
  """8 slots x 4 heads (2 KV heads) x head_dim 16 over 256 cached tokens, hidden 64: the FLOPs
  of the matmuls, not of the dilated windows (the full-size 8B decode read ~100x its FLOPs)."""
  slots, heads, head_dim, context, hidden = 8, 4, 16, 256, 64
  proj = 2 * slots * hidden * heads * head_dim  # q_proj, and o_proj the same
  attention = 2 * slots * heads * head_dim * context  # q.K^T, and P.V the same
  assert hlo_cost.hlo_text_cost(TPU_DECODE).matmul_flops == 2 * proj + 2 * attention


def _brute_force_flops(lhs, rhs, **conv) -> float:
  """2 x the multiply-adds of a convolution counted by running it on ones: each output element
  is then the number of real (input, weight) products it sums."""
  ones = lambda s: jnp.ones(s, jnp.float32)  # noqa: E731
  return 2.0 * float(jnp.sum(jax.lax.conv_general_dilated(ones(lhs), ones(rhs), **conv)))


_CONVS = {  # NCH / OIH (NCHW / OIHW) shapes, then lax.conv_general_dilated's keywords
  "padded_strided": ((2, 4, 7), (6, 4, 3), dict(window_strides=(2,), padding=[(2, 1)])),
  "grouped_dilated": (
    (2, 4, 5),
    (6, 2, 3),
    dict(
      window_strides=(2,),
      padding=[(1, 2)],
      lhs_dilation=(3,),
      rhs_dilation=(2,),
      feature_group_count=2,
    ),
  ),
  "2d_dilated": (
    (1, 3, 5, 6),
    (4, 3, 2, 3),
    dict(window_strides=(1, 1), padding=[(1, 1), (0, 2)], lhs_dilation=(2, 1), rhs_dilation=(1, 2)),
  ),
  "tpu_decode_window": (  # the q.K^T window above: 256 tokens x 16 head dims, 8 slots x 2 KV heads
    (256, 16, 8, 2),
    (2, 16, 8, 2),
    dict(window_strides=(7, 1), padding=[(0, 0), (0, 0)], lhs_dilation=(8, 2)),
  ),
}


@pytest.mark.parametrize("case", sorted(_CONVS))
def test_convolution_flops_match_a_brute_force_count(case):
  """XLA:CPU's optimised HLO of one convolution (padding, stride, lhs/rhs dilation, feature
  groups) costs what running it on ones counts."""
  lhs, rhs, conv = _CONVS[case]
  text = _compile(lambda x, w: jax.lax.conv_general_dilated(x, w, **conv), lhs, rhs).as_text()
  assert text.count(" convolution(") == 1  # XLA kept it one convolution
  assert hlo_cost.hlo_text_cost(text).matmul_flops == _brute_force_flops(lhs, rhs, **conv)


def test_batch_grouped_convolution_flops_match_a_brute_force_count():
  """batch_group_count=2 (how XLA writes a weight gradient of a grouped convolution) splits the
  batch, each output feature summing over all input features. XLA:CPU rewrites it, so the module
  is written here as XLA prints one."""
  lhs, rhs = (4, 3, 5), (6, 3, 2)
  conv = dict(window_strides=(1,), padding=[(1, 0)], batch_group_count=2)
  out = jax.eval_shape(
    lambda x, w: jax.lax.conv_general_dilated(x, w, **conv),
    *[jax.ShapeDtypeStruct(s, jnp.float32) for s in (lhs, rhs)],
  ).shape
  f32 = lambda s: f"f32[{','.join(map(str, s))}]"  # noqa: E731
  text = (
    f"ENTRY %main (a: {f32(lhs)}, b: {f32(rhs)}) -> {f32(out)} {{\n"
    f"  %a = {f32(lhs)} parameter(0)\n  %b = {f32(rhs)} parameter(1)\n"
    f"  ROOT %c = {f32(out)} convolution(%a, %b), window={{size=2 pad=1_0}}, "
    "dim_labels=bf0_oi0->bf0, batch_group_count=2\n}\n"
  )
  assert hlo_cost.hlo_text_cost(text).matmul_flops == _brute_force_flops(lhs, rhs, **conv)


ASYNC_COPY = """HloModule m, entry_computation_layout={(f32[256,256]{1,0})->f32[256,256]{1,0}}

ENTRY %main (p: f32[256,256]) -> f32[256,256] {
  %p = f32[256,256]{1,0} parameter(0)
  %cs = (f32[256,256]{1,0}, f32[256,256]{1,0}, u32[]) copy-start(f32[256,256]{1,0} %p)
  ROOT %cd = f32[256,256]{1,0} copy-done((f32[256,256]{1,0}, f32[256,256]{1,0}, u32[]) %cs)
}
"""


def test_an_async_copy_moves_its_array_once():
  """XLA:TPU moves a decode's KV pool between memories with copy-start / copy-done pairs: one
  read and one write of the array (the pair was counted as its tuples: 6x the array)."""
  assert hlo_cost.hlo_text_cost(ASYNC_COPY).bytes_accessed == 2 * 256 * 256 * 4
