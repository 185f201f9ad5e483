"""A real (tiny) Qwen3 whose weights make greedy decoding write a chosen reply.

Every layer's output projections are zero, so the residual stream at a position is the current
token's embedding; the chain's tokens get orthogonal one-hot embeddings and the untied head maps
each one to its successor. After the prompt's last token the model therefore writes `reply`
token by token, then the stop token. The reply's tokens must be distinct (a token has one
successor). It runs through the real engine, server and sampler like any checkpoint.

Given several alternative replies, a token where they part gets each of its successors at the same
logit: at temperature 1 the sampler picks one with equal probability (its seed decides, so a seeded
request always writes the same alternative), greedy decoding the lowest token id. Alternatives may
share tokens only where every path through the shared tokens is one of the replies (checked).
"""

import itertools
from collections.abc import Sequence

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


def scripted_params(base, tokenizer, reply: str | Sequence[str]):
  """A copy of the param tree `base` (numpy) that answers any chat prompt (ending in the
  generation prompt) with `reply`, or with one of the alternatives when `reply` is a sequence."""
  start = tokenizer.apply_chat_template(
    [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
  )
  after = tokenizer.encode(start, add_special_tokens=False)[-1]
  stop = registry.tokenizer_spec(FAMILY).stop_token_ids()[0]
  replies = [reply] if isinstance(reply, str) else list(reply)
  chains = [[after] + tokenizer.encode(r, add_special_tokens=False) + [stop] for r in replies]
  successors = _successors(chains)
  assert len(successors) <= D, f"{len(successors)} tokens with successors; at most {D}"
  params = jax.tree.map(np.array, base)
  leaves = updates.named_leaves(params)
  leaves["model/layers/self_attn/o_proj/kernel"][...] = 0
  leaves["model/layers/mlp/down_proj/kernel"][...] = 0
  leaves["model/norm/scale"][...] = 1
  head = leaves["lm_head/kernel"]
  head[...] = 0
  for i, (cur, nexts) in enumerate(successors.items()):
    leaves["model/embed_tokens/embedding"][cur] = np.eye(D, dtype=np.float32)[i]
    head[i, nexts] = LOGIT
  return params


def _successors(chains: list[list[int]]) -> dict[int, list[int]]:
  """token -> the tokens that may follow it, checked: the paths from the first token to the stop
  are exactly `chains` (no token repeats along a path, no path mixes two chains)."""
  successors: dict[int, list[int]] = {}
  for chain in chains:
    for cur, nxt in itertools.pairwise(chain):
      nexts = successors.setdefault(cur, [])
      if nxt not in nexts:
        nexts.append(nxt)
  paths, stack = set(), [[chains[0][0]]]
  while stack:
    path = stack.pop()
    nexts = successors.get(path[-1], [])
    if not nexts:
      paths.add(tuple(path))
    for nxt in nexts:
      assert nxt not in path, f"reply tokens must be distinct: {nxt} repeats in {path + [nxt]}"
      stack.append(path + [nxt])
  wanted = {tuple(c) for c in chains}
  assert paths == wanted, f"the replies share tokens that mix them: {sorted(paths - wanted)}"
  return successors
