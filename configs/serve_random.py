"""A tiny random-weights Qwen3 with the real Qwen3 vocabulary: the OpenAI-compatible API on
http://127.0.0.1:8000/v1 and gRPC on 127.0.0.1:9000, serving in seconds on a CPU.

python3 launch/serve.py --config=configs/serve_random.py
Every id of the Qwen3 tokenizer is in its vocabulary (the preset's 151936), replies end after ~16
random tokens (model.random_reply_tokens), and its prompt and context caps are those of
configs/eval_server.py (the recipe's 2048-token prompt + 65536 response tokens): a chat with
tools, launch/eval.py --config=configs/eval_server.py and launch/harbor_eval.py
--serve=configs/serve_random.py run against it as against a trained model (and solve nothing).
A checkpoint's architecture at random weights (vLLM's --load-format dummy; DIR needs only its
config.json): --config.model.checkpoint=DIR --config.model.random=true. The checkpoint itself:
--config.model.checkpoint=DIR.
"""

from tmax_jax.agents import EpisodeConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.inference.openai_api import OpenAIConfig
from tmax_jax.loop import ModelSpec, ServeConfig, ServingConfig
from tmax_jax.recipes import CPU_1, MAX_PROMPT

# Qwen3's shapes shrunk to start in seconds; the vocabulary stays the preset's.
TINY = dict(
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
)
# configs/eval_server.py's longest context: every turn's request carries the whole context so far
MAX_SEQUENCE = MAX_PROMPT + EpisodeConfig().max_response_tokens


def get_config():
  return to_config_dict(
    ServeConfig(
      topology=CPU_1,
      model=ModelSpec(preset="qwen3-0.6b", overrides=TINY, random_reply_tokens=16),
      serving=ServingConfig(
        port=9000,
        engine=EngineConfig(
          max_concurrent_decodes=8, max_len=MAX_SEQUENCE, max_prefill_length=MAX_SEQUENCE
        ),
      ),
      openai=OpenAIConfig(port=8000),
    )
  )
