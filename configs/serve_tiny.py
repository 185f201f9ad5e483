"""A tiny random Qwen3 served on loopback over gRPC: smoke tests and CPU benches.

python3 launch/serve.py --config=configs/serve_tiny.py --config.serving.port=9000
Its 256-token vocabulary and 128-token prompts are for token-id clients: the OpenAI-compatible API
(--config.openai.port=8000) needs a vocabulary that holds the tokenizer's, and eval_server's prompts
are longer; configs/serve_random.py serves both. A checkpoint: --config.model.checkpoint=DIR.
"""

from tmax_jax.config_dict import to_config_dict
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import ModelSpec, ServeConfig, ServingConfig
from tmax_jax.recipes import CPU_1

TINY = dict(
  vocab_size=256,
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
)


def get_config():
  return to_config_dict(
    ServeConfig(
      topology=CPU_1,
      model=ModelSpec(preset="qwen3-0.6b", overrides=TINY),
      serving=ServingConfig(
        port=9000,
        engine=EngineConfig(max_concurrent_decodes=8, max_len=256, max_prefill_length=128),
      ),
    )
  )
