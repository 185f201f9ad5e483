"""Forward+backward time of our Flax Qwen3 vs the transformers torch model, same config, on CPU.

Both compute the mean next-token log-likelihood loss (ours through the chunked fp32 head) and its
gradient w.r.t. all params, fp32, from identical weights (ours are loaded from the torch model's
safetensors). Prints one markdown row per run and, with --append, appends it to BENCHMARKS.md.

  python3 bench/model_fwd_bwd.py --append BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import report  # bench/report.py (the script's directory is on sys.path)
import torch
import transformers

from tmax_jax.models import build_model, head_weight, hf_io
from tmax_jax.models.logprobs import token_logprobs


def hf_config(args) -> transformers.PretrainedConfig:
  return transformers.Qwen3Config(
    vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 3,
    num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4,
    head_dim=args.hidden // 8, tie_word_embeddings=False, max_position_embeddings=4096)


def torch_step(model, tokens):
  ids = torch.tensor(tokens, dtype=torch.long)

  def step():
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
    loss = -logp.mean()
    loss.backward()
    return float(loss.detach())

  return step


def jax_step(cfg, params, tokens, chunk):
  model = build_model(cfg)
  b, t = tokens.shape
  positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  segments = jnp.ones((b, t), jnp.int32)
  tokens = jnp.asarray(tokens, jnp.int32)

  def loss(p):
    hidden, _ = model.apply({"params": p}, tokens, positions, segments)
    logp, _ = token_logprobs(hidden[:, :-1], head_weight(p, cfg), tokens[:, 1:], chunk_size=chunk)
    return -jnp.mean(logp)

  grad = jax.jit(jax.value_and_grad(loss))
  return lambda: float(jax.block_until_ready(grad(params))[0])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--hidden", type=int, default=512)
  parser.add_argument("--seq", type=int, default=512)
  parser.add_argument("--batch", type=int, default=4)
  parser.add_argument("--vocab", type=int, default=16384)
  parser.add_argument("--chunk", type=int, default=256)
  parser.add_argument("--remat", default="none")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--append", type=pathlib.Path, default=None)
  args = parser.parse_args()

  torch.manual_seed(0)
  ref = transformers.AutoModelForCausalLM.from_config(hf_config(args), dtype=torch.float32)
  ref.config._attn_implementation = "sdpa"
  with tempfile.TemporaryDirectory() as tmp:
    ref.save_pretrained(tmp)
    cfg, params = hf_io.load_pretrained(tmp, remat_policy=args.remat)
  tokens = np.random.default_rng(0).integers(0, args.vocab, (args.batch, args.seq))

  ours_fn, theirs_fn = jax_step(cfg, params, tokens, args.chunk), torch_step(ref.train(), tokens)
  loss_ours, loss_theirs = ours_fn(), theirs_fn()
  if abs(loss_ours - loss_theirs) > 1e-4 * abs(loss_theirs):
    raise SystemExit(f"losses differ: ours {loss_ours} vs transformers {loss_theirs}")
  ours, ours_min = report.time_it(ours_fn, args.repeats)
  theirs, theirs_min = report.time_it(theirs_fn, args.repeats)
  load = os.getloadavg()[0]
  row = (f"| {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} | Qwen3 L={args.layers} "
         f"D={args.hidden} V={args.vocab} B={args.batch} T={args.seq} fp32, remat={args.remat} | "
         f"{ours:.3f} (min {ours_min:.3f}) | {theirs:.3f} (min {theirs_min:.3f}) | "
         f"{theirs / ours:.2f}x | jax {jax.__version__} / torch {torch.__version__}, "
         f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, load {load:.1f} |")
  print(row)
  if args.append:
    report.append_row(args.append, "model_fwd_bwd", (
        "\n## Model forward+backward on CPU (bench/model_fwd_bwd.py)\n\n"
        "Median seconds per step (loss = mean next-token log-likelihood, grads of all "
        "params); ratio = torch / ours (> 1: ours faster).\n\n"
        "| when (UTC) | config | ours s | transformers s | ratio | setup |\n"
        "|---|---|---|---|---|---|\n"), row)


if __name__ == "__main__":
  main()
