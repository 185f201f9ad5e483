"""TPU: the Pallas splash attention kernel (jax.experimental.pallas.ops.tpu.splash_attention).

The kernel works per example on [N, T, H] with GQA natively (N a multiple of K), a lazy causal mask
and segment ids, all evaluated inside the kernel. Its causal mask is by index, which equals the
model's position mask for training rows (positions increase by one inside each contiguous packed
segment; packing writes them that way). Padding tokens (segment 0) attend among themselves inside
the kernel (finite junk, as in the reference); no live token sees them. `interpret=True` runs the
same kernel through the Pallas interpreter, which is how CPU tests check it; by default the kernel
is the interpreter whenever the mesh's platform (sharding.platform, not `jax.default_backend()`,
which stays "cpu" while compiling for a TPU topology) is not TPU.

XLA cannot partition a Mosaic kernel, so under a mesh of more than one device the kernel runs
inside `jax.shard_map` over every free mesh axis: each shard attends its local [b, T, n, H] block,
b and n split as the logical axis rules split the activations' `batch` and `heads` (the sequence
axis > 1 case never comes here: it is ring attention). A dimension its mesh axes do not divide is
replicated (every shard computes it). K/V heads follow the query heads: split like them when the
rules split `kv_heads` the same way and K divides, else replicated and each shard takes the K/V
heads its own query heads read (GQA with fewer K/V heads than tensor shards).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel_lib
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib
from jax.sharding import PartitionSpec as P

from tmax_jax import sharding
from tmax_jax.models.attention import blockwise
from tmax_jax.models.config import DEFAULT_LOGICAL_AXIS_RULES

MIN_BLOCK = 128  # the kernel's lane width: T is padded to a multiple of the block, >= this
DEFAULT_BLOCK = 512  # TPU tile edge unless the config says otherwise


def _kernel(t: int, num_heads: int, block: int, interpret: bool):
  mask = mask_lib.MultiHeadMask([mask_lib.CausalMask((t, t)) for _ in range(num_heads)])
  sizes = kernel_lib.BlockSizes(
    block_q=block,
    block_kv=block,
    block_kv_compute=block,
    block_q_dkv=block,
    block_kv_dkv=block,
    block_kv_dkv_compute=block,
    block_q_dq=block,
    block_kv_dq=block,
  )
  # Built inside the caller's trace, its mask tables constants of that program (the mask
  # processing itself is cached by mask_info_lib). Not an eager, cached object: under a TPU
  # topology's mesh an eager array is placed on the mesh's devices, which a compile-only
  # topology cannot run ("'Executable' object has no attribute 'local_devices'").
  return kernel_lib.make_splash_mha(
    mask, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret
  )


def _attend(q, k, v, segment_ids, scale: float, block: int | None, interpret: bool):
  """The kernel on (local) q [b,T,n,H], k/v [b,T,k,H], segment_ids [b,T] -> [b,T,n,H]."""
  t, n = q.shape[1], q.shape[2]
  block = max(MIN_BLOCK, min(block or DEFAULT_BLOCK, -(-t // MIN_BLOCK) * MIN_BLOCK))
  q, k, v, seg = (blockwise.pad_time(x, block) for x in (q, k, v, segment_ids.astype(jnp.int32)))
  kernel = _kernel(q.shape[1], n, block, interpret)

  def heads_first(x):  # [B,T,N,H] -> [B,N,T,H]
    return jnp.swapaxes(x, 1, 2)

  def one(q_b, k_b, v_b, seg_b):
    return kernel(q_b, k_b, v_b, segment_ids=kernel_lib.SegmentIds(seg_b, seg_b))

  # the kernel does not scale the scores: fold the scale into q (as the kernel's reference does)
  out = jax.vmap(one)(
    heads_first(q * jnp.asarray(scale, q.dtype)), heads_first(k), heads_first(v), seg
  )
  return jnp.swapaxes(out, 1, 2)[:, :t].astype(q.dtype)


def _mesh_axes(mesh, axes, dim: int) -> tuple[str, ...] | None:
  """The free mesh axes of one logical rule's result that split a length-`dim` axis, or None
  (replicated) when there are none or they do not divide it."""
  names = (axes,) if isinstance(axes, str) else tuple(axes or ())
  names = tuple(a for a in names if a in mesh.axis_names and a not in mesh.manual_axes)
  if not names or dim % math.prod(mesh.shape[a] for a in names):
    return None
  return names


def shard_plan(q_shape, num_kv_heads: int):
  """How the kernel is laid over the mesh being traced under: None when no shard_map is needed
  (no mesh, or one free device), else (q spec, k/v spec, kv heads to take per shard or None, the
  free mesh axes). Specs follow the logical rules in context (config's defaults outside one)."""
  mesh = jax.sharding.get_abstract_mesh()
  free = tuple(a for a in mesh.axis_names if a not in mesh.manual_axes) if not mesh.empty else ()
  if math.prod(mesh.shape[a] for a in free) <= 1:
    return None
  b, _, n, _ = q_shape
  rules = nn.get_logical_axis_rules() or DEFAULT_LOGICAL_AXIS_RULES
  q_rule = nn.logical_to_mesh_axes(("batch", "length", "heads", "head_dim"), rules)
  kv_rule = nn.logical_to_mesh_axes(("batch", "length", "kv_heads", "head_dim"), rules)
  assert q_rule is not None and kv_rule is not None  # None only when no rules are given
  batch = _mesh_axes(mesh, q_rule[0], b)
  heads = _mesh_axes(mesh, q_rule[2], n)
  kv_heads, take = None, None
  if heads is not None:
    if _mesh_axes(mesh, kv_rule[2], num_kv_heads) == heads:
      kv_heads = heads
    else:  # K/V replicated over the head shards; each takes what its query heads read
      take = heads
  q_spec = P(batch, None, heads, None)
  return q_spec, P(batch, None, kv_heads, None), take, free


def _local_kv_heads(k, v, num_heads: int, local_heads: int, axes: tuple[str, ...]):
  """k/v [b,T,K,H] (all K/V heads) -> the K/V heads this shard's query heads [s*n, (s+1)*n) read
  (n = local_heads): the one head they share when a group holds them all, else one per query
  head (plain multi-head attention locally)."""
  group = num_heads // k.shape[2]  # query heads per K/V head
  first = lax.axis_index(axes) * local_heads
  if group % local_heads == 0:
    return tuple(lax.dynamic_slice_in_dim(x, first // group, 1, axis=2) for x in (k, v))
  index = (first + jnp.arange(local_heads)) // group
  return tuple(jnp.take(x, index, axis=2) for x in (k, v))


def attention(
  q,
  k,
  v,
  segment_ids,
  *,
  scale: float | None = None,
  block: int | None = None,
  interpret: bool | None = None,
) -> jax.Array:
  """q [B,T,N,H], k/v [B,T,K,H], segment_ids [B,T] -> [B,T,N,H] in q's dtype (causal by index).

  interpret: run the kernel in the Pallas interpreter; None = whenever the mesh's platform
  (sharding.platform) is not TPU. Under a mesh the kernel runs per shard (module docstring).
  """
  interpret = sharding.platform() != "tpu" if interpret is None else interpret
  scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
  plan = shard_plan(q.shape, k.shape[2])
  if plan is None:
    return _attend(q, k, v, segment_ids, scale, block, interpret)
  q_spec, kv_spec, take, free = plan
  n = q.shape[2]

  def body(q, k, v, seg):  # q [b,T,n,H], k/v [b,T,k,H] (or [b,T,K,H] to take from), seg [b,T]
    if take is not None:
      k, v = _local_kv_heads(k, v, n, q.shape[2], take)
    return _attend(q, k, v, seg, scale, block, interpret)

  seg_spec = P(q_spec[0], None)
  return jax.shard_map(
    body,
    in_specs=(q_spec, kv_spec, kv_spec, seg_spec),
    out_specs=q_spec,
    axis_names=set(free),
    check_vma=False,
  )(q, k, v, segment_ids)
