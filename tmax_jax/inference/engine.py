"""A `jetstream.engine.engine_api.Engine` (0.2.2 API) for every tmax_jax model family.

Family-agnostic: the engine only uses the Model API (BUILD_NOTES.md) - `build_model(cfg)`,
`model.init_cache(batch, max_len)`, `apply(..., cache=cache)` and `head_weight`. The only assumption
about the cache pytree is that every leaf is `[L, B, ...]` (layer axis, then batch), which holds for
attention K/V/segment-ids and for Gated-DeltaNet conv/recurrent state alike.

Decode protocol (JetStream 0.2.2 emits tokens only from `generate`):
  * prefill(prompt of n tokens) runs the model on tokens[0:n-1] into a batch-1 cache of the full
    length S, and keeps tokens[n-1] and its position as the slot's next input (no sampling).
  * insert copies that whole cache row into slot b (so stale state of the previous occupant is
    overwritten) and the request's sampling settings into the per-slot vectors.
  * generate feeds each slot's pending token, writes its K/V (or state), computes fp32-head logits,
    samples, and returns ResultTokens whose int32 `data` has 5 columns:
      [token, valid, length, float32 bits of the behaviour logprob, policy version].
    JetStream reads the first three; the RL driver (driver.py) reads all five.
Weights live in a `ParamsBox` (returned by `load_params`): `generate` reads it once per step, so a
weight push lands between decode steps and every token is tagged with the version that produced it.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jetstream.engine import engine_api, tokenizer_api, tokenizer_pb2

from tmax_jax.inference import sampling
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig

TOKEN, VALID, LENGTH, LOGPROB, VERSION = range(5)  # ResultTokens.data columns


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  """Serving shape and defaults. max_len = prompt + generated tokens per slot (cache length S)."""
  max_concurrent_decodes: int = 8
  max_len: int = 1024
  max_prefill_length: int = 512
  stop_token_ids: tuple[int, ...] = ()
  default_sampling: sampling.SamplingParams = sampling.SamplingParams(temperature=0.0)
  tokenizer_path: str = ""  # HF tokenizer dir for JetStream text requests; "" = token ids only

  def __post_init__(self):
    if self.max_prefill_length > self.max_len:
      raise ValueError(f"EngineConfig.max_prefill_length={self.max_prefill_length} must be <= "
                       f"max_len={self.max_len}")
    if self.max_concurrent_decodes < 1:
      raise ValueError("EngineConfig.max_concurrent_decodes must be >= 1")


@dataclasses.dataclass(frozen=True)
class PrefillInput:
  """What the RL driver hands to `prefill` as `padded_tokens`: tokens [P] plus request settings."""
  tokens: np.ndarray
  params: sampling.SamplingParams


class ParamsBox:
  """Thread-safe holder of (params, version); the engine's `Params` object."""

  def __init__(self, params: Any, version: int = 0):
    self._lock = threading.Lock()
    self._params, self._version = params, version

  def get(self) -> tuple[Any, int]:
    with self._lock:
      return self._params, self._version

  def swap(self, params: Any, version: int) -> None:
    with self._lock:
      self._params, self._version = params, version

  @property
  def version(self) -> int:
    with self._lock:
      return self._version


class TokenizerAdapter(tokenizer_api.Tokenizer):
  """JetStream's Tokenizer API over an HF tokenizer (or none: token-id requests only)."""

  def __init__(self, hf_tokenizer, stop_ids: tuple[int, ...], pad_id: int):
    self._tok, self._stop, self._pad = hf_tokenizer, set(stop_ids), pad_id

  def encode(self, s: str, **kwargs):
    if self._tok is None:
      raise ValueError("this server has no tokenizer (EngineConfig.tokenizer_path is empty): "
                       "send token ids")
    ids = np.asarray(self._tok.encode(s, add_special_tokens=False), np.int32)
    return ids, len(ids)

  def decode(self, token_ids: list[int], **kwargs) -> str:
    return "" if self._tok is None else self._tok.decode(token_ids)

  @property
  def pad_id(self) -> int:
    return self._pad

  @property
  def eos_id(self) -> int:
    return min(self._stop) if self._stop else -1

  @property
  def bos_id(self) -> int:
    return -1  # Qwen models have no BOS token

  @property
  def stop_tokens(self) -> set[int]:
    return set(self._stop)


def _slot_arrays(p: sampling.SamplingParams) -> dict[str, jax.Array]:
  return dict(temperature=jnp.float32(p.temperature), top_p=jnp.float32(p.top_p),
              top_k=jnp.int32(p.top_k), key=jax.random.PRNGKey(p.seed))


class TmaxEngine(engine_api.Engine):
  """JetStream engine over a tmax_jax model. `params_fn()` returns the initial param tree."""

  def __init__(self, model_cfg: ModelConfig, engine_cfg: EngineConfig,
               params_fn: Callable[[], Any], devices=None):
    self.model_cfg, self.cfg = model_cfg, engine_cfg
    self.model = registry.build_model(model_cfg)
    self._params_fn = params_fn
    self._box: ParamsBox | None = None
    devices = list(devices) if devices is not None else jax.devices()[:1]
    self._mesh = jax.sharding.Mesh(np.asarray(devices[:1]), ("data",))
    self._device = devices[0]
    self._prefill_jit = jax.jit(self._prefill_impl)
    self._insert_jit = jax.jit(self._insert_impl, donate_argnums=(1,))
    self._generate_jit = jax.jit(self._generate_impl, donate_argnums=(1,))

  # ---- jitted bodies -------------------------------------------------------------------------

  def _prefill_impl(self, params, tokens, true_length):
    """tokens [P] int32, true_length [] -> batch-1 cache with tokens[0:n-1] written."""
    p = tokens.shape[0]
    positions = jnp.arange(p, dtype=jnp.int32)[None, :]  # [1,P]
    segments = (positions < true_length - 1).astype(jnp.int32)  # [1,P]; the last token waits
    cache = self.model.init_cache(1, self.cfg.max_len)
    _, cache = self.model.apply({"params": params}, tokens[None, :], positions, segments,
                                cache=cache)
    return cache

  def _insert_impl(self, prefix, state, slot):
    """Writes the batch-1 prefix into row `slot` of every [L,B,...] leaf and per-slot vector."""

    def put_row(dst, src):  # dst [L,B,...], src [L,1,...]
      start = (0, slot) + (0,) * (dst.ndim - 2)
      return jax.lax.dynamic_update_slice(dst, src.astype(dst.dtype), start)

    new = dict(state)
    new["cache"] = jax.tree.map(put_row, state["cache"], prefix["cache"])
    for name in ("token", "position", "temperature", "top_p", "top_k", "key"):
      new[name] = state[name].at[slot].set(prefix[name])
    new["counter"] = state["counter"].at[slot].set(0)
    new["active"] = state["active"].at[slot].set(True)
    return new

  def _generate_impl(self, params, state, version):
    """One decode step for every slot -> (state, data [B,5] int32)."""
    cfg = self.model_cfg
    live = state["active"] & (state["position"] < self.cfg.max_len)  # [B]
    hidden, cache = self.model.apply(
        {"params": params}, state["token"][:, None], state["position"][:, None],
        live.astype(jnp.int32)[:, None], cache=state["cache"])  # hidden [B,1,D]
    head_w = registry.head_weight(params, cfg)  # [D,V]
    logits = logprobs_lib.full_logits(hidden, head_w, cfg.dtypes.head)[:, 0]  # [B,V] fp32
    tokens, logp = sampling.sample(logits, state["key"], state["counter"], state["temperature"],
                                   state["top_p"], state["top_k"])
    counter = state["counter"] + 1
    data = jnp.stack([
        tokens, live.astype(jnp.int32), counter,
        jax.lax.bitcast_convert_type(logp, jnp.int32),
        jnp.broadcast_to(jnp.asarray(version, jnp.int32), tokens.shape)], axis=1)  # [B,5]
    new = dict(state, cache=cache, token=tokens, position=state["position"] + 1, counter=counter)
    return new, data

  # ---- Engine API ----------------------------------------------------------------------------

  def load_params(self, *args, **kwargs) -> ParamsBox:
    if self._box is None:
      self._box = ParamsBox(jax.device_put(self._params_fn(), self._device), version=0)
    return self._box

  def init_decode_state(self, *args, **kwargs) -> dict[str, jax.Array]:
    b = self.cfg.max_concurrent_decodes
    with jax.default_device(self._device):
      return dict(
          cache=self.model.init_cache(b, self.cfg.max_len),
          token=jnp.zeros((b,), jnp.int32), position=jnp.zeros((b,), jnp.int32),
          counter=jnp.zeros((b,), jnp.int32), active=jnp.zeros((b,), jnp.bool_),
          temperature=jnp.zeros((b,), jnp.float32), top_p=jnp.ones((b,), jnp.float32),
          top_k=jnp.zeros((b,), jnp.int32), key=jnp.zeros((b, 2), jnp.uint32))

  def prefill(self, *, params: ParamsBox, existing_prefix=None, padded_tokens,
              true_length: int) -> dict[str, jax.Array]:
    if existing_prefix is not None:
      raise NotImplementedError("existing_prefix: send the whole conversation as token ids")
    if isinstance(padded_tokens, PrefillInput):
      tokens, sp = padded_tokens.tokens, padded_tokens.params
    else:
      tokens, sp = padded_tokens, self.cfg.default_sampling
    if not 1 <= true_length <= self.cfg.max_len:
      raise ValueError(f"prompt length {true_length} must be in [1, max_len={self.cfg.max_len}]")
    tokens = jnp.asarray(tokens, jnp.int32)
    p, _ = params.get()
    cache = self._prefill_jit(p, tokens, jnp.int32(true_length))
    return dict(cache=cache, token=tokens[true_length - 1], position=jnp.int32(true_length - 1),
                **_slot_arrays(sp))

  def insert(self, prefix, decode_state, slot: int):
    return self._insert_jit(prefix, decode_state, jnp.int32(slot))

  def generate(self, params: ParamsBox, decode_state):
    p, version = params.get()
    state, data = self._generate_jit(p, decode_state, jnp.int32(version))
    return state, engine_api.ResultTokens(
        data=data, tokens_idx=(TOKEN, TOKEN + 1), valid_idx=(VALID, VALID + 1),
        length_idx=(LENGTH, LENGTH + 1), samples_per_slot=1)

  def get_prefix_destination_sharding(self) -> Any:
    return jax.sharding.SingleDeviceSharding(self._device)

  def get_tokenizer(self) -> tokenizer_pb2.TokenizerParameters:
    return tokenizer_pb2.TokenizerParameters(path=self.cfg.tokenizer_path)

  def build_tokenizer(self, metadata: tokenizer_pb2.TokenizerParameters) -> TokenizerAdapter:
    tok = None
    if metadata.path:
      from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
      tok = AutoTokenizer.from_pretrained(metadata.path)
    pad = self.model_cfg.pad_token_id
    return TokenizerAdapter(tok, self.cfg.stop_token_ids, 0 if pad is None else pad)

  @property
  def max_concurrent_decodes(self) -> int:
    return self.cfg.max_concurrent_decodes

  @property
  def samples_per_slot(self) -> int:
    return 1

  @property
  def max_prefill_length(self) -> int:
    return self.cfg.max_prefill_length

  @property
  def mesh(self) -> jax.sharding.Mesh:
    return self._mesh

  @property
  def colocated_cpus(self) -> None:
    return None


def decode_row(data: np.ndarray, slot: int) -> tuple[int, bool, int, float, int]:
  """Host side: (token, valid, length, logprob, version) of one slot from ResultTokens.data."""
  row = np.asarray(data[slot])
  logp = float(row[LOGPROB:LOGPROB + 1].view(np.float32)[0])
  return int(row[TOKEN]), bool(row[VALID]), int(row[LENGTH]), logp, int(row[VERSION])
