"""jax's Pallas paged attention kernel (models/pallas_paged.py) in the TPU interpreter equals the
pure-JAX paged attention (models/paged_attention.py) on one decode step: fp32, GQA, slots of
different lengths (an empty one, one ending on a page boundary), scattered pages, on one device and
per shard under a tensor mesh. K/V are drawn on the bfloat16 grid: the kernel casts K/V pages to
bfloat16 (exact there), everything else is fp32, so the fp32 tolerance holds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax import sharding
from tmax_jax.errors import UserError
from tmax_jax.models import paged_attention, pallas_paged
from tmax_jax.models.config import DEFAULT_LOGICAL_AXIS_RULES

B, N, K, H, P, NP, NB = 4, 8, 2, 16, 4, 40, 8


def _bf16_grid(x: np.ndarray) -> np.ndarray:
  return np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32))


def _inputs(seed: int = 0):
  rng = np.random.default_rng(seed)
  cached = np.array([0, 5, 16, 30], np.int32)  # tokens already in each slot's pages
  table = np.stack([rng.permutation(NP)[:NB] for _ in range(B)]).astype(np.int32)
  cache = dict(
    k_pages=_bf16_grid(rng.normal(size=(NP, P, K, H)).astype(np.float32)),
    v_pages=_bf16_grid(rng.normal(size=(NP, P, K, H)).astype(np.float32)),
    table=table,
    cached=cached,
  )
  q = rng.normal(size=(B, 1, N, H)).astype(np.float32)
  k = _bf16_grid(rng.normal(size=(B, 1, K, H)).astype(np.float32))
  v = _bf16_grid(rng.normal(size=(B, 1, K, H)).astype(np.float32))
  return q, k, v, cache


BLOCK = paged_attention.BLOCK_TOKENS


def _kernel(q, k, v, cache):
  """The kernel in the TPU interpreter over the cache's pages, as paged_attention calls it."""
  pages = tuple(cache[name] for name in paged_attention.PAGED_KEYS)
  return pallas_paged.attend(q, k, v, pages, BLOCK, interpret=True)


def _reference(q, k, v, cache):
  mask = jnp.ones((B, 1, 1), bool)  # every slot's own token is live
  return jax.jit(paged_attention.attend)(q, k, v, mask, cache)[0]


def test_kernel_in_the_interpreter_equals_the_pure_jax_paged_attention():
  q, k, v, cache = _inputs()
  out = jax.jit(_kernel)(q, k, v, cache)
  assert out.shape == (B, 1, N, H)
  np.testing.assert_allclose(np.asarray(out), np.asarray(_reference(q, k, v, cache)), atol=1e-5)


@pytest.mark.parametrize("tensor", [2, 4])  # K/V heads split with the queries; replicated (K=2 < 4)
def test_kernel_per_shard_under_a_tensor_mesh(tensor):
  q, k, v, cache = _inputs(1)
  mesh = sharding.make_mesh(data=1, fsdp=1, tensor=tensor, devices=jax.devices()[:tensor])
  with sharding.use_mesh(mesh, DEFAULT_LOGICAL_AXIS_RULES):
    out = jax.jit(_kernel)(q, k, v, cache)
  np.testing.assert_allclose(np.asarray(out), np.asarray(_reference(q, k, v, cache)), atol=1e-5)


def test_pages_per_block_divides_the_table():
  assert pallas_paged.pages_per_block(32, 16, BLOCK) == 32  # 512 keys
  assert pallas_paged.pages_per_block(64, 16, BLOCK) == 32
  assert pallas_paged.pages_per_block(24, 16, BLOCK) == 24
  assert (
    pallas_paged.pages_per_block(40, 16, BLOCK) == 20
  )  # the largest divisor of 40 within 32 pages


@pytest.mark.parametrize(
  "kernel, head_dim, dtype, message",
  [
    ("mosaic", 128, "bfloat16", "expected one of ['jax', 'pallas']"),
    ("pallas", 64, "bfloat16", "head_dim to be a multiple of 128"),
    ("pallas", 128, "float32", "needs dtypes.compute_dtype='bfloat16'"),
  ],
)
def test_check_names_the_field_and_what_is_expected(kernel, head_dim, dtype, message):
  with pytest.raises(UserError, match=r"EngineConfig\.paged_kernel") as err:
    paged_attention.check_kernel(kernel, head_dim, dtype)
  assert message in str(err.value)
  paged_attention.check_kernel("jax", head_dim, dtype)  # the default serves anything
  paged_attention.check_kernel("pallas", 256, "bfloat16")
