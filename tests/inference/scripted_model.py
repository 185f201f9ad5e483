"""A real (tiny) Qwen3 whose weights make greedy decoding write a chosen reply.

Every layer's output projections are zero, so the residual stream at a position is the current
token's embedding; the chain's tokens get orthogonal one-hot embeddings and the untied head maps
each one to its successor. After the prompt's last token the model therefore writes `reply`
token by token, then the stop token. The reply's tokens must be distinct (a token has one
successor). It runs through the real engine, server and sampler like any checkpoint.
"""

import itertools

import jax
import numpy as np

from tmax_jax.inference import updates
from tmax_jax.models import registry
from tmax_jax.models.config import DtypePolicy

FAMILY = "qwen3"
D = 64
LOGIT = 10.0  # per unit of the normalised one-hot: successor logit = sqrt(D) * LOGIT = 80


def model_config():
  spec = registry.tokenizer_spec(FAMILY)
  vocab = -(-spec.vocab_size // 64) * 64
  return registry.preset(
    "qwen3-0.6b",
    vocab_size=vocab,
    hidden_size=D,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    tie_word_embeddings=False,
    dtypes=DtypePolicy(param_dtype="float32", compute_dtype="float32", head_dtype="float32"),
  )


def scripted_params(base, tokenizer, reply: str):
  """A copy of the param tree `base` (numpy) that answers any chat prompt (ending in the
  generation prompt) with `reply`."""
  start = tokenizer.apply_chat_template(
    [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
  )
  after = tokenizer.encode(start, add_special_tokens=False)[-1]
  stop = registry.tokenizer_spec(FAMILY).stop_token_ids()[0]
  chain = [after] + tokenizer.encode(reply, add_special_tokens=False) + [stop]
  states = chain[:-1]
  assert len(set(states)) == len(states) <= D, f"reply tokens must be distinct: {states}"
  params = jax.tree.map(np.array, base)
  leaves = updates.named_leaves(params)
  leaves["model/layers/self_attn/o_proj/kernel"][...] = 0
  leaves["model/layers/mlp/down_proj/kernel"][...] = 0
  leaves["model/norm/scale"][...] = 1
  head = leaves["lm_head/kernel"]
  head[...] = 0
  for i, (cur, nxt) in enumerate(itertools.pairwise(chain)):
    leaves["model/embed_tokens/embedding"][cur] = np.eye(D, dtype=np.float32)[i]
    head[i, nxt] = LOGIT
  return params
