"""Shared by tests/harbor: skips (with the reason) when the Harbor venv or podman is missing,
procedural tasks on disk, and a tiny served checkpoint whose replies end."""

import pathlib

import jax
import numpy as np
import pytest

from tmax_jax.harbor import venv
from tmax_jax.harbor.jobs import ENVIRONMENT
from tmax_jax.inference import updates
from tmax_jax.models import hf_io
from tmax_jax.models import registry as model_registry
from tmax_jax.models.config import DtypePolicy
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.procedural import registry as task_registry

PLUGIN = f"harbor:{ENVIRONMENT}"  # the runner backend that is our own sandbox behind Harbor's API
TB2 = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "tb2-public-envs"


def require_harbor() -> None:
  reason = venv.unavailable()
  if reason:
    pytest.skip(f"Harbor venv not installed: {reason}")


def require_podman() -> None:
  from tmax_jax.sandbox.backends import podman

  reason = podman.podman_available()
  if reason:
    pytest.skip(f"podman cannot run here: {reason}")


def write_tasks(root: pathlib.Path, family: str = "line_tool", levels=(0, 1, 2)) -> pathlib.Path:
  """Procedural tasks of `family` (one per level, with oracles) as task dirs under root."""
  for level in levels:
    task = task_registry.build_task(family, level, level)
    fmt.write_task(task, root / task.name)
  return root


def stop_biased_checkpoint(out: pathlib.Path) -> pathlib.Path:
  """A tiny random Qwen3 with the real Qwen3 vocabulary whose replies end after a few tokens.

  Attention and MLP outputs are zero, so the final hidden state is the current token's embedding;
  every embedding has 1.0 in dimension 0, and the head reads that dimension into <|im_end|> only,
  with a logit of ~10 against ~0 for every other token: each step ends the reply with p ~ 0.15,
  else samples a near-uniformly random token. (A plainly random tiny model never ends a reply,
  and Terminus-2 asks again after a truncated reply, with no turn limit.)"""
  spec = model_registry.tokenizer_spec("qwen3")
  cfg = model_registry.preset(
    "qwen3-0.6b",
    vocab_size=-(-spec.vocab_size // 64) * 64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    tie_word_embeddings=False,
    dtypes=DtypePolicy(param_dtype="float32", compute_dtype="float32", head_dtype="float32"),
  )
  params = jax.tree.map(np.array, model_registry.init_params(cfg, jax.random.key(0)))
  leaves = updates.named_leaves(params)
  leaves["model/layers/self_attn/o_proj/kernel"][...] = 0
  leaves["model/layers/mlp/down_proj/kernel"][...] = 0
  leaves["model/norm/scale"][...] = 1
  emb, head = leaves["model/embed_tokens/embedding"], leaves["lm_head/kernel"]
  emb[:, 0] = 1.0
  h0 = float(np.mean(1.0 / np.sqrt((emb**2).mean(axis=1))))  # dimension 0 after the final norm
  head[0, :] = 0.0
  head[0, spec.stop_token_ids()[0]] = 10.2 / h0
  hf_io.save_pretrained(out, params, cfg)
  return out
