"""A tiny random Qwen3 served on loopback: smoke tests and CPU benches.

python3 launch/serve.py --config=configs/serve_tiny.py --config.server.port=9000
Serve a checkpoint instead: --config.model.checkpoint=/path/to/hf_dir
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.model = ml_collections.ConfigDict(
    dict(
      checkpoint="",
      preset="qwen3-0.6b",
      seed=0,
      param_dtype="float32",
      compute_dtype="float32",
      head_dtype="float32",
      overrides=dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
      ),
    )
  )
  c.engine = ml_collections.ConfigDict(
    dict(
      max_concurrent_decodes=8,
      max_len=256,
      max_prefill_length=128,
      page_size=16,
      prefix_cache=True,
      decode_steps=4,
      max_topk=0,
      stop_token_ids=[],
      temperature=0.0,
      tokenizer_path="",
      replicas=1,
      tensor=1,
    )
  )
  c.server = ml_collections.ConfigDict(dict(port=9000, host="127.0.0.1", threads=0))
  # OpenAI-compatible HTTP API: port -1 = off (the tiny vocabulary cannot hold a real tokenizer's
  # ids; serve a checkpoint to use it), 0 = a free port.
  c.openai = ml_collections.ConfigDict(
    dict(port=-1, host="127.0.0.1", model_name="", tokenizer="", tool_call_format="")
  )
  c.ready_file = ""
  return c
