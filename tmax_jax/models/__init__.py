"""Model families, their config, shared layers, log-probs and HF checkpoint I/O."""

from tmax_jax.models.config import (
  DtypePolicy,
  ModelConfig,
  RopeScaling,
  UnsupportedConfigError,
)
from tmax_jax.models.logprobs import full_logits, token_logprobs
from tmax_jax.models.registry import (
  abstract_params,
  build_model,
  count_params,
  from_hf_config,
  head_weight,
  init_params,
  preset,
)

__all__ = [
  "DtypePolicy",
  "ModelConfig",
  "RopeScaling",
  "UnsupportedConfigError",
  "abstract_params",
  "build_model",
  "count_params",
  "from_hf_config",
  "full_logits",
  "head_weight",
  "init_params",
  "preset",
  "token_logprobs",
]
