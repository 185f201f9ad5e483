"""Acceptance (#13): the compiled temp memory of the whole train step grows at most linearly in T
with the blockwise kernel (4x T -> <= 4.5x temp bytes) and quadratically with the reference, for
dense Qwen and Qwen3.5 (whose full-attention layers must honour attention_impl and
attention_q_chunk: the test fails if they ignore either). Compile-only (memory_analysis)."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import long_context  # noqa: E402  (bench/long_context.py: small models, compiled step memory)

T = 256


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
@pytest.mark.parametrize(
  "name", ["dense", pytest.param("qwen3_5", marks=[pytest.mark.slow, pytest.mark.full])]
)
def test_train_step_memory_linear_blockwise_quadratic_reference(name):
  base = long_context.small_models(tiny=True)[name]
  blockwise = base.replace(attention_impl="blockwise", attention_q_chunk=64, attention_kv_chunk=64)
  reference = base.replace(attention_impl="reference")
  bw = [long_context.temp_bytes(blockwise, t) for t in (T, 4 * T)]
  ref = [long_context.temp_bytes(reference, t) for t in (T, 4 * T)]
  assert bw[1] <= 4.5 * bw[0], f"blockwise {bw} grows faster than linear"
  assert ref[1] >= 8 * ref[0], f"reference {ref} does not grow quadratically"
  assert bw[1] * 3 < ref[1], (bw, ref)
  if name == "qwen3_5":  # its full-attention layers used to drop attention_q_chunk
    chunked = long_context.temp_bytes(reference.replace(attention_q_chunk=64), 4 * T)
    assert chunked * 3 < ref[1], (chunked, ref)
