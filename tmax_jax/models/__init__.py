"""Model families, their config, shared layers, log-probs and HF checkpoint I/O.

The face (`__all__`, checked by tests/test_faces.py): outside `tmax_jax.models`, import the names
below from here, and the public modules and family packages listed in `__all__` (the families and
attention/ have faces of their own). The layers, the shared blocks and the kernels are internal.
"""

from tmax_jax.models.config import (
  CONTEXT_PARALLEL_RULES,
  DEFAULT_LOGICAL_AXIS_RULES,
  DtypePolicy,
  ModelConfig,
  RopeScaling,
  UnsupportedConfigError,
  check_dtype,
  load_hf_dict,
)
from tmax_jax.models.logprobs import full_logits, saves_logits, token_logprobs
from tmax_jax.models.registry import (
  abstract_params,
  build_model,
  count_params,
  from_hf_config,
  head_weight,
  init_params,
  preset,
)
from tmax_jax.models.tokenizer_spec import TokenizerSpec

__all__ = [
  # a model's config and dtypes
  "CONTEXT_PARALLEL_RULES",
  "DEFAULT_LOGICAL_AXIS_RULES",
  "DtypePolicy",
  "ModelConfig",
  "RopeScaling",
  "TokenizerSpec",
  "UnsupportedConfigError",
  "check_dtype",
  "from_hf_config",
  "load_hf_dict",
  "preset",
  # building one and its params
  "abstract_params",
  "build_model",
  "count_params",
  "head_weight",
  "init_params",
  # log-probs
  "full_logits",
  "saves_logits",
  "token_logprobs",
  # public modules, used whole
  "decoder",  # the decoder stack's pieces (the plan reads its scan and remat)
  "dummy_weights",  # random weights shaped like a checkpoint (serving without one)
  "hf_io",  # HF checkpoint read / write
  "logprobs",  # chunked log-probs and their memory switches
  "paged_attention",  # the paged KV cache the serving engine decodes with
  "registry",  # families, presets, params and shardings by family name
  # packages with their own faces
  "attention",
  "qwen",
  "qwen3_5",
]
