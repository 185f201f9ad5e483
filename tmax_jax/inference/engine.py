"""A `jetstream.engine.engine_api.Engine` (0.2.2 API) for every tmax_jax model family.

The maths lives in decode.py (`DecodeCore`, no JetStream import); this module adapts it to the
Engine API. Family-agnostic: only the Model API (BUILD_NOTES.md) is used, and the only assumption
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
import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jetstream.engine import engine_api, tokenizer_api, tokenizer_pb2

from tmax_jax.inference import decode, sampling
from tmax_jax.models.config import ModelConfig


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
  """Thread-safe holder of the served weights and their version; the engine's `Params` object.

  Holds `prepare(params)` = {"params": ..., "head": ...} (see DecodeCore.prepare), computed before
  the swap so a decode step never waits for it.
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
    served = self._prepare(params)
    with self._lock:
      self._served, self._version = served, version

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


class TmaxEngine(engine_api.Engine):
  """JetStream engine over a tmax_jax model. `params_fn()` returns the initial param tree."""

  def __init__(self, model_cfg: ModelConfig, engine_cfg: EngineConfig,
               params_fn: Callable[[], Any], devices=None):
    self.model_cfg, self.cfg = model_cfg, engine_cfg
    self.core = decode.DecodeCore(model_cfg, engine_cfg.max_concurrent_decodes, engine_cfg.max_len)
    self._params_fn = params_fn
    self._box: ParamsBox | None = None
    devices = list(devices) if devices is not None else jax.devices()[:1]
    self._mesh = jax.sharding.Mesh(np.asarray(devices[:1]), ("data",))
    self._device = devices[0]

  # ---- Engine API ----------------------------------------------------------------------------

  def load_params(self, *args, **kwargs) -> ParamsBox:
    if self._box is None:
      self._box = ParamsBox(jax.device_put(self._params_fn(), self._device), version=0,
                            prepare=self.core.prepare)
    return self._box

  def init_decode_state(self, *args, **kwargs) -> dict[str, jax.Array]:
    with jax.default_device(self._device):
      return self.core.init_state()

  def prefill(self, *, params: ParamsBox, existing_prefix=None, padded_tokens,
              true_length: int) -> dict[str, jax.Array]:
    if existing_prefix is not None:
      raise NotImplementedError("existing_prefix: send the whole conversation as token ids")
    if isinstance(padded_tokens, PrefillInput):
      tokens, sp = padded_tokens.tokens, padded_tokens.params
    else:
      tokens, sp = padded_tokens, self.cfg.default_sampling
    return self.core.prefill(params.get()[0]["params"], tokens, true_length, sp)

  def insert(self, prefix, decode_state, slot: int):
    return self.core.insert(prefix, decode_state, jnp.int32(slot))

  def generate(self, params: ParamsBox, decode_state):
    served, version = params.get()
    state, data = self.core.generate(served, decode_state, jnp.int32(version))
    return state, engine_api.ResultTokens(
        data=data, tokens_idx=(decode.TOKEN, decode.TOKEN + 1),
        valid_idx=(decode.VALID, decode.VALID + 1), length_idx=(decode.LENGTH, decode.LENGTH + 1),
        samples_per_slot=1)

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


decode_row = decode.decode_row
