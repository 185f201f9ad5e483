"""The jitted device side of one serving replica: a paged KV pool, per-slot decode state, and the
programs the scheduler (scheduler.py) drives. Kept free of JetStream imports so benchmarks
(bench/gpu_decode.py) run where only JAX/Flax exist.

Family-agnostic: only the Model API is used. The model's own dense cache (`init_cache`) tells the
layout: a sub-dict {k, v, segment_ids} is an attention layer (its K/V become pages of a shared pool,
models/paged_attention.py), every other leaf `[L, B, ...]` is per-sequence state (Qwen3.5's Gated
DeltaNet conv/recurrent state) kept as one small block per slot, plus `state_blocks` more blocks
the prefix cache stores boundary states in.

Decode state (`DecodeState`, a dict of device arrays, donated through every program):
  pool        the cache tree: attention sub-dicts {k_pages, v_pages: [L,NP,P,K,H]}, state leaves
              [L, slots + state_blocks, ...]; with `CoreShape.unrolled` a list of L such
              trees, one per layer, each with a layer axis of 1
  token, position, counter, active, temperature, top_p, top_k, key, limit: per slot [B];
  stop: per slot [B, max_stop] (the request's stop ids, -1 padded)
Programs: `prefill` writes a batch of prompt chunks [R,C] of R slots into their pages/state (no
head, no sampling: the last prompt token stays pending); `decode` feeds every slot's pending token,
samples with the fp32 head and returns data [B, 5 + 2K] int32:
  [token, valid, length, float32 bits of the behaviour logprob, policy version,
   K top-K ids, K float32 bits of their logprobs]   (K = max_topk; JetStream reads the first 3)
`decode_program(n)` runs n such steps in one call (data [n, B, 5 + 2K]): one dispatch and one
read-back per n tokens of every slot. A slot then stops by itself, as the host would between
steps: a step is live while the slot is active, its position < max_len and its counter <= limit
(max_tokens: the step after the last token still writes that token, as the host's one-step lag
does), and the step that writes a generated stop id is the slot's last. So a slot writes exactly
the tokens the one-step loop writes, whatever n (the prefix cache and the recurrent state stay
exact).
`activate`/`deactivate` a slot, `copy_page` (copy-on-write of a shared prefix page), `save_state` /
`load_state` (a slot's recurrent state to/from a prefix-cache block).

Layers: by default the scanned stack is served over the stacked pool. `CoreShape.unrolled` serves
the model unscanned (`prepare` unstacks the pushed, scanned params once per weight version into
`model/layers_{i}`) over one pool buffer per layer, so no step slices (on XLA:CPU: copies) the
[L, ...] weight stacks; each layer's pool is written in place after the whole model ran
(`_write_back` makes the writes depend on the final hidden state, so XLA orders them after every
page read instead of copying the pool). Measured on CPU it is no faster
(docs/design/inference.md "Decode profile"); bench/gpu_decode.py --unrolled is the accelerator
check.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Any, TypedDict

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Bool, Float, Int, UInt32

from tmax_jax import sharding
from tmax_jax.inference import sampling
from tmax_jax.models import ModelConfig, paged_attention, registry
from tmax_jax.models import logprobs as logprobs_lib

TOKEN, VALID, LENGTH, LOGPROB, VERSION, TOPK = range(6)  # columns of decode's data (TOPK: first)
TENSOR = "tensor"
SLOT_FIELDS = ("token", "position", "temperature", "top_p", "top_k", "key", "limit", "stop")


class DecodeState(TypedDict):
  """Per-slot decode state of one replica (B = slots; see the module docstring): the page pool
  and each slot's pending token, position, count of generated tokens, whether it is live, its
  sampling settings, threefry key data, max_tokens and stop ids (-1 padded)."""

  pool: Any  # the cache tree of page pools [L,NP,P,K,H] and state blocks [L, B + blocks, ...]
  token: Int[Array, " B"]
  position: Int[Array, " B"]
  counter: Int[Array, " B"]
  active: Bool[Array, " B"]
  temperature: Float[Array, " B"]
  top_p: Float[Array, " B"]
  top_k: Int[Array, " B"]
  key: UInt32[Array, "B 2"]
  limit: Int[Array, " B"]
  stop: Int[Array, "B max_stop"]


@dataclasses.dataclass(frozen=True)
class CoreShape:
  """Static sizes of one replica: slots, cache length, pages (NP of P tokens), extra state blocks
  for the prefix cache, and the top-K width of decode's output."""

  slots: int
  max_len: int
  page_size: int
  num_pages: int
  state_blocks: int = 0
  max_topk: int = 0
  unrolled: bool = False
  max_stop: int = 8  # stop ids per request the device checks (decode_program's own stops)
  paged_kernel: str = "jax"  # decode steps' attention over pages on TPU (EngineConfig's)

  @property
  def max_pages(self) -> int:
    """Block-table width: pages of one slot at max_len."""
    return -(-self.max_len // self.page_size)


def slot_arrays(
  p: sampling.SamplingParams, max_tokens: int, stop_ids=(), max_stop: int = 8
) -> dict[str, np.ndarray | np.generic]:
  """Per-request settings as per-slot values: sampling, the decode limit (max_tokens) and the
  stop ids padded with -1 to `max_stop` (more is a ValueError: the device would not see them).
  The seed is taken modulo 2^31 (PRNGKey silently keeps only 32 bits without x64). The key is
  `jax.random.PRNGKey(seed)`'s threefry data, [0, seed], built on the host: calling PRNGKey ran a
  device computation per admitted request inside the scheduler loop."""
  stop = sorted(int(t) for t in stop_ids)
  if len(stop) > max_stop:
    raise ValueError(
      f"{len(stop)} stop token ids, at most {max_stop} per request (CoreShape.max_stop)"
    )
  return dict(
    temperature=np.float32(p.temperature),
    top_p=np.float32(p.top_p),
    top_k=np.int32(p.top_k),
    key=np.array([0, p.seed % (1 << 31)], np.uint32),
    limit=np.int32(max_tokens),
    stop=np.array(stop + [-1] * (max_stop - len(stop)), np.int32),
  )


def serving_rules(rules) -> tuple:
  """The model's logical-axis rules restricted to a replica's one mesh axis ("tensor"): axes the
  serving mesh does not have (data, fsdp, sequence) are dropped, i.e. replicated."""
  out = []
  for logical, mesh_axes in rules:
    axes = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes or ())
    kept = tuple(a for a in axes if a == TENSOR)
    out.append((logical, kept[0] if len(kept) == 1 else (kept or None)))
  return tuple(out)


def serving_config(model_cfg: ModelConfig) -> ModelConfig:
  """The model config with `serving_rules` (what serving meshes shard params with)."""
  return dataclasses.replace(
    model_cfg, logical_axis_rules=serving_rules(model_cfg.logical_axis_rules)
  )


def param_shardings(model_cfg: ModelConfig, mesh: Mesh):
  """NamedShardings of the served params on a serving mesh (only its "tensor" axis splits)."""
  return registry.param_shardings(serving_config(model_cfg), mesh)


def _is_dense_kv(tree) -> bool:
  return isinstance(tree, dict) and {"k", "v", "segment_ids"} <= set(tree)


def _is_pool_kv(tree) -> bool:
  return isinstance(tree, dict) and "k_pages" in tree


def _map_layers(tree, is_kv, kv_fn, leaf_fn, *others):
  """Maps attention sub-dicts (is_kv) with kv_fn and every other leaf with leaf_fn; `others` are
  trees walked in parallel (same nesting of dicts and per-layer lists down to the attention
  sub-dicts)."""
  if is_kv(tree):
    return kv_fn(tree, *others)
  if isinstance(tree, list):
    return [
      _map_layers(sub, is_kv, kv_fn, leaf_fn, *(o[i] for o in others)) for i, sub in enumerate(tree)
    ]
  if isinstance(tree, dict):
    return {
      name: _map_layers(sub, is_kv, kv_fn, leaf_fn, *(o[name] for o in others))
      for name, sub in tree.items()
    }
  return leaf_fn(tree, *others)


def _dense_cache(model_cfg: ModelConfig, page_size: int):
  model = registry.build_model(model_cfg)
  return jax.eval_shape(lambda: model.init_cache(1, page_size))


def _per_layer(stack, model_cfg: ModelConfig, tree, lift: Callable):
  """A stacked cache tree (shapes or logical axes) -> L per-layer trees of the model's `stack`
  (decoder.DecoderStack), leaves mapped by lift(leaf) (the layer's own entry of the layer axis)."""
  entries = [stack.layer_entry(model_cfg, tree, i)[0] for i in range(model_cfg.num_hidden_layers)]
  spec = lambda x: isinstance(x, PartitionSpec)  # noqa: E731
  return [jax.tree.map(lift, e, is_leaf=spec) for e in entries]


def is_stateful(model_cfg: ModelConfig) -> bool:
  """Whether the family's cache has per-sequence state besides attention K/V (Qwen3.5)."""
  leaves: list[Any] = []
  _map_layers(_dense_cache(model_cfg, 1), _is_dense_kv, lambda kv: None, leaves.append)
  return bool(leaves)


class PagedCore:
  """Jitted prefill/decode over a paged pool for one replica on `mesh` (1-D, axis "tensor").

  Holds no device state (that is the scheduler's), so `shared` hands every engine with the same
  model, shape and devices one instance, and its compiled programs.
  """

  @classmethod
  @functools.cache
  def shared(cls, model_cfg: ModelConfig, shape: CoreShape, mesh: Mesh | None = None):
    return cls(model_cfg, shape, mesh)

  def __init__(self, model_cfg: ModelConfig, shape: CoreShape, mesh: Mesh | None = None):
    self.model_cfg, self.shape = model_cfg, shape
    paged_attention.check_kernel(shape.paged_kernel, model_cfg.head_dim, model_cfg.dtypes.compute)
    self.mesh = mesh or Mesh(np.asarray(jax.devices()[:1]), (TENSOR,))
    self.rules = serving_rules(model_cfg.logical_axis_rules)
    # Unrolled: the unscanned model (what a scanned config's params are unstacked for); else the
    # config as it is (an unscanned training config is served unscanned over the stacked pool).
    served_cfg = dataclasses.replace(model_cfg, scan_layers=False) if shape.unrolled else model_cfg
    self.model = registry.build_model(served_cfg)
    self._dense = _dense_cache(model_cfg, shape.page_size)
    self._cache_axes = self.model.cache_logical_axes()  # the same scanned or not
    if shape.unrolled:
      one = lambda x: jax.ShapeDtypeStruct((1,) + x.shape[1:], x.dtype)  # noqa: E731
      self._dense = _per_layer(self.model.stack, model_cfg, self._dense, one)
      self._cache_axes = _per_layer(self.model.stack, model_cfg, self._cache_axes, lambda a: a)
    self.stateful = is_stateful(model_cfg)
    self._abstract_params = registry.abstract_params(model_cfg)
    self.state_shardings = self._state_shardings()
    rep = NamedSharding(self.mesh, PartitionSpec())
    jit = _jit_in_mesh(self.mesh, self.rules)
    self.prepare = jit(self._prepare_impl)
    self.prefill = jit(self._prefill_impl, donate_argnums=(1,), out_shardings=self.state_shardings)
    self._decode_programs: dict[int, _MeshJit] = {}
    self._decode_jit = lambda fn: jit(
      fn, donate_argnums=(1,), out_shardings=(self.state_shardings, rep)
    )
    self.decode = self.decode_program(1)
    self.activate = jit(
      self._activate_impl, donate_argnums=(0,), out_shardings=self.state_shardings
    )
    self.deactivate = jit(
      self._deactivate_impl, donate_argnums=(0,), out_shardings=self.state_shardings
    )
    self.copy_page = jit(
      self._copy_page_impl, donate_argnums=(0,), out_shardings=self.state_shardings
    )
    self.copy_state = jit(
      self._copy_state_impl, donate_argnums=(0,), out_shardings=self.state_shardings
    )

  # ---- state ---------------------------------------------------------------------------------

  @property
  def state_rows(self) -> int:
    return self.shape.slots + self.shape.state_blocks

  def _tp(self, tensor: int | None) -> int:
    return self.mesh.shape[TENSOR] if tensor is None else tensor

  def _kv_spec(self, kv_heads: int, tensor: int | None = None) -> PartitionSpec:
    """K/V pages [L,NP,P,K,H] split on kv heads over "tensor" (replicated when it does not
    divide them)."""
    split = kv_heads % self._tp(tensor) == 0
    return PartitionSpec(None, None, None, TENSOR if split else None, None)

  def _abstract_state(self):
    s = self.shape

    def kv(sub):
      lx, _, _, k, h = sub["k"].shape
      page = jax.ShapeDtypeStruct((lx, s.num_pages, s.page_size, k, h), sub["k"].dtype)
      return {"k_pages": page, "v_pages": page}

    def leaf(x):
      return jax.ShapeDtypeStruct((x.shape[0], self.state_rows) + x.shape[2:], x.dtype)

    b = s.slots
    vec = lambda dt: jax.ShapeDtypeStruct((b,), dt)  # noqa: E731
    return dict(
      pool=_map_layers(self._dense, _is_dense_kv, kv, leaf),
      token=vec(jnp.int32),
      position=vec(jnp.int32),
      counter=vec(jnp.int32),
      active=vec(jnp.bool_),
      temperature=vec(jnp.float32),
      top_p=vec(jnp.float32),
      top_k=vec(jnp.int32),
      key=jax.ShapeDtypeStruct((b, 2), jnp.uint32),
      limit=vec(jnp.int32),
      stop=jax.ShapeDtypeStruct((b, s.max_stop), jnp.int32),
    )

  def _state_shardings(self):
    rep = NamedSharding(self.mesh, PartitionSpec())
    abstract = self._abstract_state()

    def kv(sub):
      spec = NamedSharding(self.mesh, self._kv_spec(sub["k_pages"].shape[3]))
      return {"k_pages": spec, "v_pages": spec}

    def leaf(x, spec):
      return NamedSharding(self.mesh, self._state_spec(x.shape, spec))

    pool = _map_layers(
      abstract["pool"], _is_pool_kv, lambda sub, _: kv(sub), leaf, self._cache_axes
    )
    return dict({k: rep for k in abstract if k != "pool"}, pool=pool)

  def _state_spec(self, shape, logical: PartitionSpec, tensor: int | None = None) -> PartitionSpec:
    """A state leaf's mesh axes from the family's `cache_logical_axes` under the serving rules
    (Qwen3.5: conv channels and recurrent heads split over "tensor"): a dimension the tensor axis
    does not divide stays replicated."""
    rules, tp = dict(self.rules), self._tp(tensor)
    return PartitionSpec(
      *(
        TENSOR if rules.get(name) == TENSOR and n % tp == 0 else None
        for name, n in zip(logical, shape, strict=True)
      )
    )

  def init_state(self) -> DecodeState:
    """Zeroed decode state, created on device with `state_shardings` (top_p 1 = off)."""
    abstract = self._abstract_state()

    def make():
      state = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), abstract)
      return dict(state, top_p=jnp.ones_like(state["top_p"]))

    state: DecodeState = jax.jit(make, out_shardings=self.state_shardings)()
    return state

  def memory_bytes(self, per_device_of: int = 0) -> dict[str, int]:
    """Bytes of this replica's page pool (K and V of every attention layer) and state blocks; with
    `per_device_of` = t: what one device holds when the replica has t tensor devices (the
    shardings above, computed for t without needing t devices)."""
    out = {"kv_pool_bytes": 0, "state_bytes": 0}
    t = per_device_of or None

    def size(x, spec) -> int:
      split = self._tp(t) if per_device_of and TENSOR in tuple(spec) else 1
      return int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize // split

    def kv(sub, _):
      pages = sub["k_pages"]
      out["kv_pool_bytes"] += 2 * size(pages, self._kv_spec(pages.shape[3], t))

    def leaf(x, logical):
      out["state_bytes"] += size(x, self._state_spec(x.shape, logical, t))

    _map_layers(self._abstract_state()["pool"], _is_pool_kv, kv, leaf, self._cache_axes)
    return out

  # ---- programs ------------------------------------------------------------------------------

  def _prepare_impl(self, params):
    """-> what `decode` takes: {params in the served dtypes and layer layout, head [D,V] in the
    head dtype}. Done once per weight version, so decode steps do not re-cast (or, when tied,
    re-transpose) it."""
    cfg = self.model_cfg
    params = jax.tree.map(lambda x, a: x.astype(a.dtype), params, self._abstract_params)
    head = registry.head_weight(params, cfg).astype(cfg.dtypes.head)
    return {"params": self.served_layout(params), "head": head}

  def served_layout(self, params: Any) -> Any:
    """Scanned params (what pushes carry) -> the layout the programs take (unstacked when
    unrolled), the same values."""
    if self.shape.unrolled and self.model_cfg.scan_layers:
      return self.model.stack.unstack_params(self.model_cfg, params)
    return params

  def abstract_served(self, shardings) -> Any:
    """The params a push must match (the scanned layout `prepare` takes, served dtypes) as
    ShapeDtypeStructs on `shardings` (ReplicaEngine.param_shardings)."""
    return jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      self._abstract_params,
      shardings,
    )

  def _apply(self, params, tokens, positions, segments, cache):
    """The model over the call's paged cache -> (hidden [R,T,D], new K/V and state in the pool's
    layout)."""
    if self.shape.unrolled:
      cache = [jax.tree.map(lambda x: x[0], c) for c in cache]
    with paged_attention.use_kernel(self.shape.paged_kernel):
      hidden, out = self.model.apply({"params": params}, tokens, positions, segments, cache=cache)
    if self.shape.unrolled:
      out = [jax.tree.map(lambda x: x[None], o) for o in out]
    return hidden, out

  def _call_cache(self, pool, table, cached, rows):
    """The model's paged cache for one call: pool pages + tables for attention layers, state rows
    (`rows` [R] slot ids, or None = rows 0..B-1) for the rest."""

    def kv(sub):
      lx = sub["k_pages"].shape[0]
      return dict(
        sub,
        table=jnp.broadcast_to(table, (lx,) + table.shape),
        cached=jnp.broadcast_to(cached, (lx,) + cached.shape),
      )

    def leaf(x):
      if rows is None:
        return x[:, : self.shape.slots]
      return jnp.take(x, rows, axis=1, mode="clip")

    return _map_layers(pool, _is_pool_kv, kv, leaf)

  def _write_back(self, pool, out, hidden, table, positions, segments, rows):
    """Scatters the call's new K/V into pages (padding dropped) and its new state into rows.

    Unrolled, the page writes depend on `hidden` (the model's output, so on every layer's page
    reads): a layer's new K/V do not depend on its own attention, and without that edge XLA
    cannot order the in-place write of its buffer after the reads and copies it. A NaN hidden
    state then drops the writes (its tokens are garbage anyway). The scanned stack needs no
    edge: its scan's outputs come after all of its reads."""
    ps, n_pages = self.shape.page_size, self.shape.num_pages
    page = jnp.take_along_axis(table, positions // ps, axis=1, mode="clip")  # [R,T]
    written = segments != 0
    if self.shape.unrolled:
      written &= ~jnp.isnan(hidden[:1, :1, :1].astype(jnp.float32)).reshape(())
    flat = jnp.where(written, page * ps + positions % ps, n_pages * ps).reshape(-1)

    def kv(sub, new):
      def put(pages, x):  # pages [L,NP,P,K,H], x [L,R,T,K,H]
        lx, _, _, k, h = pages.shape
        upd = (
          pages.reshape(lx, n_pages * ps, k, h)
          .at[:, flat]
          .set(x.reshape(lx, -1, k, h).astype(pages.dtype), mode="drop")
        )
        return upd.reshape(pages.shape)

      return {"k_pages": put(sub["k_pages"], new["k"]), "v_pages": put(sub["v_pages"], new["v"])}

    def leaf(x, new):
      if rows is None:
        return jax.lax.dynamic_update_slice_in_dim(x, new.astype(x.dtype), 0, axis=1)
      return x.at[:, rows].set(new.astype(x.dtype), mode="drop")

    return _map_layers(pool, _is_pool_kv, kv, leaf, out)

  def _prefill_impl(
    self,
    params: Any,
    state: DecodeState,
    tokens: Int[Array, "R C"],
    positions: Int[Array, "R C"],
    segments: Int[Array, "R C"],
    rows: Int[Array, " R"],
    table: Int[Array, "R NB"],
    cached: Int[Array, " R"],
  ) -> DecodeState:
    """tokens/positions/segments [R,C] (segment 0 = padding), rows [R] slot ids (padding rows:
    any id >= state rows), table [R,NB], cached [R] tokens already in the rows' pages."""
    cache = self._call_cache(state["pool"], table, cached, rows)
    hidden, out = self._apply(params, tokens, positions, segments, cache)
    pool = self._write_back(state["pool"], out, hidden, table, positions, segments, rows)
    return {**state, "pool": pool}

  def decode_program(self, steps: int) -> _MeshJit:
    """The jitted program of `steps` decode steps per call (the table must hold the pages of
    every position they may write): (served, state, table [B,NB], version) -> (state, data
    [B, 5 + 2K] for one step, [steps, B, 5 + 2K] for more). Compiled once per count."""
    if steps < 1:
      raise ValueError(f"decode steps per call must be >= 1, got {steps}")
    if steps not in self._decode_programs:
      impl = functools.partial(self._decode_impl, steps=steps)
      self._decode_programs[steps] = self._decode_jit(impl)
    return self._decode_programs[steps]

  def _decode_impl(self, served, state, table, version, steps: int = 1):
    """`steps` decode steps of every slot (a scan when more than one; see the module docstring
    for when a slot stops by itself)."""
    if steps == 1:
      return self._decode_step(served, table, version, state)
    return jax.lax.scan(
      lambda st, _: self._decode_step(served, table, version, st), state, None, length=steps
    )

  def _decode_step(
    self, served: dict, table: Int[Array, "B NB"], version: Any, state: DecodeState
  ) -> tuple[DecodeState, Int[Array, "B data"]]:
    """One decode step for every slot; table [B,NB] -> (state, data [B, 5 + 2K] int32)."""
    cfg, shape = self.model_cfg, self.shape
    live = (
      state["active"] & (state["position"] < shape.max_len) & (state["counter"] <= state["limit"])
    )  # [B]
    # The pending token is a generated stop id (counter > 0: not the prompt's last token): this
    # step writes it, and it is the slot's last.
    stops = jnp.any(state["token"][:, None] == state["stop"], axis=1) & (state["counter"] > 0)
    pos, seg = state["position"][:, None], live.astype(jnp.int32)[:, None]  # [B,1]
    cache = self._call_cache(state["pool"], table, state["position"], None)
    hidden, out = self._apply(served["params"], state["token"][:, None], pos, seg, cache)
    pool = self._write_back(state["pool"], out, hidden, table, pos, seg, None)  # hidden [B,1,D]
    logits = logprobs_lib.full_logits(hidden, served["head"], cfg.dtypes.head)[:, 0]  # [B,V]
    tokens, logp = sampling.sample(
      logits, state["key"], state["counter"], state["temperature"], state["top_p"], state["top_k"]
    )
    counter = state["counter"] + 1
    bits = lambda x: jax.lax.bitcast_convert_type(x, jnp.int32)  # noqa: E731
    versions = jnp.broadcast_to(jnp.asarray(version, jnp.int32), tokens.shape)
    cols = [x[:, None] for x in (tokens, live.astype(jnp.int32), counter, bits(logp), versions)]
    if shape.max_topk:
      top_lp, top_ids = sampling.top_logprobs(logits, state["temperature"], shape.max_topk)
      cols += [top_ids, bits(top_lp)]
    data = jnp.concatenate(cols, axis=1)
    new: DecodeState = {
      **state,
      "pool": pool,
      "token": tokens,
      "position": state["position"] + live,
      "counter": counter,
      "active": state["active"] & ~stops,
    }
    return new, data

  def _activate_impl(self, state, slot, *values):
    """values: SLOT_FIELDS' values of the slot's request (slot_arrays + token, position)."""
    new = dict(state)
    for name, value in zip(SLOT_FIELDS, values, strict=True):
      new[name] = state[name].at[slot].set(value)
    new["counter"] = state["counter"].at[slot].set(0)
    new["active"] = state["active"].at[slot].set(True)
    return new

  def _deactivate_impl(self, state, slot):
    return dict(state, active=state["active"].at[slot].set(False))

  def _copy_page_impl(self, state, src, dst):
    def kv(sub):
      return {name: sub[name].at[:, dst].set(sub[name][:, src]) for name in ("k_pages", "v_pages")}

    return dict(state, pool=_map_layers(state["pool"], _is_pool_kv, kv, lambda x: x))

  def _copy_state_impl(self, state, src, dst):
    return dict(
      state,
      pool=_map_layers(
        state["pool"], _is_pool_kv, lambda sub: sub, lambda x: x.at[:, dst].set(x[:, src])
      ),
    )


class _MeshJit:
  """jax.jit whose calls (and `lower`) trace and run inside the replica's mesh + logical-rules
  context, so the models' logical activation constraints shard over the replica's tensor axis."""

  def __init__(self, fn, mesh: Mesh, rules, **kw):
    self._jit, self._mesh, self._rules = jax.jit(fn, **kw), mesh, rules

  def __call__(self, *args):
    with sharding.use_mesh(self._mesh, self._rules):
      return self._jit(*args)

  def lower(self, *args):
    with sharding.use_mesh(self._mesh, self._rules):
      return self._jit.lower(*args)

  def eval_shape(self, *args):
    with sharding.use_mesh(self._mesh, self._rules):
      return jax.eval_shape(self._jit, *args)


def _jit_in_mesh(mesh: Mesh, rules):
  return lambda fn, **kw: _MeshJit(fn, mesh, rules, **kw)


class ParamsBox:
  """Thread-safe holder of one replica's served weights and their version.

  Holds `prepare(params)` = {"params", "head"} (see PagedCore.prepare), computed before the swap so
  a decode step never waits for it.
  """

  def __init__(self, params: Any, version: int = 0, prepare: Callable[[Any], dict] | None = None):
    self._lock = threading.Lock()
    self._prepare = prepare or (lambda p: {"params": p})
    self._served, self._version = self._prepare(params), version

  def get(self) -> tuple[dict, int]:
    """-> ({"params", "head"}, version), read atomically."""
    with self._lock:
      return self._served, self._version

  def swap(self, params: Any, version: int) -> None:
    self.set(self._prepare(params), version)

  def set(self, served: dict, version: int) -> None:
    with self._lock:
      self._served, self._version = served, version

  @property
  def version(self) -> int:
    with self._lock:
      return self._version


def decode_rows(data: np.ndarray, max_topk: int) -> dict[str, np.ndarray]:
  """Host side: decode's data [B, 5 + 2K] -> token/valid/length/logprob/version [B] and
  topk_ids/topk_logprobs [B,K]."""
  data = np.asarray(data)
  k = max_topk
  return dict(
    token=data[:, TOKEN],
    valid=data[:, VALID].astype(bool),
    length=data[:, LENGTH],
    logprob=np.ascontiguousarray(data[:, LOGPROB]).view(np.float32),
    version=data[:, VERSION],
    topk_ids=data[:, TOPK : TOPK + k],
    topk_logprobs=np.ascontiguousarray(data[:, TOPK + k : TOPK + 2 * k]).view(np.float32),
  )
