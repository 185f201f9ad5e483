"""Forward+backward time of our Flax Qwen3 vs the transformers torch model, same config, on CPU.

Both compute the mean next-token log-likelihood loss (ours through the chunked fp32 head) and its
gradient w.r.t. all params, fp32, from identical weights (ours are loaded from the torch model's
safetensors); the losses are checked equal first. Timed side by side with report.compare (>= 5
alternated pairs after a warm-up), the torch side in its own process (report.torch_side, glibc
malloc as torch users have it, or --theirs_malloc tuned); prints one markdown row, and with
--append adds it to BENCHMARKS.md unless the machine was busy (report.record_row).

  python3 bench/model_fwd_bwd.py --append BENCHMARKS.md [--pairs 7] [--vocab 1024]
    [--theirs_malloc default|tuned]
"""

from __future__ import annotations

import pathlib
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import report  # bench/report.py (the script's directory is on sys.path)
import torch
import transformers

from tmax_jax import cli
from tmax_jax.models import build_model, head_weight, hf_io, saves_logits, token_logprobs


def hf_config(args) -> transformers.PretrainedConfig:
  return transformers.Qwen3Config(
    vocab_size=args.vocab,
    hidden_size=args.hidden,
    intermediate_size=args.hidden * 3,
    num_hidden_layers=args.layers,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=args.hidden // 8,
    tie_word_embeddings=False,
    max_position_embeddings=4096,
  )


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


def torch_side_step(hf_dir: str, tokens):
  """WorkerSide factory: the transformers model saved in `hf_dir` (sdpa attention) -> step."""
  ref = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
  ref.config._attn_implementation = "sdpa"
  return torch_step(ref.train(), tokens)


def loss_fn(cfg, batch: int, seq: int, chunk: int):
  """(params, tokens [B,T] int32) -> mean next-token negative log-likelihood (chunked fp32 head)."""
  model = build_model(cfg)
  positions = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))
  segments = jnp.ones((batch, seq), jnp.int32)

  def loss(p, tokens):
    hidden, _ = model.apply({"params": p}, tokens, positions, segments)
    logp, _ = token_logprobs(
      hidden[:, :-1],
      head_weight(p, cfg),
      tokens[:, 1:],
      chunk_size=chunk,
      save_logits=saves_logits(cfg.remat_policy, batch * (seq - 1), cfg.vocab_size),
    )
    return -jnp.mean(logp)

  return loss


def jax_step(cfg, params, tokens, chunk):
  grad = jax.jit(jax.value_and_grad(loss_fn(cfg, *tokens.shape, chunk)))
  tokens = jnp.asarray(tokens, jnp.int32)
  return lambda: float(jax.block_until_ready(grad(params, tokens))[0])


HEADING = (
  "\n## Model forward+backward on CPU (bench/model_fwd_bwd.py)\n\n"
  "`python3 bench/model_fwd_bwd.py`: seconds per step (loss = mean next-token log-likelihood, "
  "grads of all params, fp32, identical weights); median over alternated pairs; ratio = median "
  "of the per-pair ratios transformers / ours (> 1: ours faster), with its min-max.\n\n"
  "| when (UTC) | config | ours s | transformers s | ratio | setup |\n"
  "|---|---|---|---|---|---|\n"
)
TINY = dict(layers=2, hidden=64, seq=32, batch=2, vocab=256, chunk=16)


def main(argv=None) -> dict:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument("--layers", type=int, default=4, help="decoder layers")
  parser.add_argument("--hidden", type=int, default=512, help="model width")
  parser.add_argument("--seq", type=int, default=512, help="sequence length")
  parser.add_argument("--batch", type=int, default=4, help="batch size")
  parser.add_argument("--vocab", type=int, default=16384, help="vocabulary size")
  parser.add_argument("--chunk", type=int, default=256, help="logprob chunk size")
  parser.add_argument("--remat", default="none", help="rematerialisation policy")
  parser.add_argument(
    "--pairs", type=int, default=report.MIN_PAIRS, help="alternated ours/theirs pairs"
  )
  parser.add_argument("--tiny", action="store_true", help="tiny shapes (tests)")
  parser.add_argument(
    "--theirs_malloc",
    choices=report.MALLOC_CHOICES,
    default="default",
    help="glibc malloc of the torch process: as torch users have it, or tuned as ours",
  )
  parser.add_argument(
    "--append",
    type=pathlib.Path,
    default=None,
    help="BENCHMARKS.md to append the row to (quiet machine only)",
  )
  args = parser.parse_args(argv)
  if args.tiny:
    vars(args).update(TINY)

  torch.manual_seed(0)
  ref = transformers.AutoModelForCausalLM.from_config(hf_config(args), dtype=torch.float32)
  tokens = np.random.default_rng(0).integers(0, args.vocab, (args.batch, args.seq))
  with tempfile.TemporaryDirectory() as tmp:
    ref.save_pretrained(tmp)
    del ref
    cfg, params = hf_io.load_pretrained(tmp, remat_policy=args.remat)
    theirs = report.torch_side(
      "model_fwd_bwd:torch_side_step", tmp, tokens, malloc=args.theirs_malloc
    )  # loads the same weights in its own process
  with theirs:
    ours_fn = jax_step(cfg, params, tokens, args.chunk)
    loss_ours = ours_fn()
    theirs()
    loss_theirs = theirs.value
    if abs(loss_ours - loss_theirs) > 1e-4 * abs(loss_theirs):
      raise SystemExit(f"losses differ: ours {loss_ours} vs transformers {loss_theirs}")
    c = report.compare(ours_fn, theirs, pairs=args.pairs, timed=(False, True))
  config = (
    f"Qwen3 L={args.layers} D={args.hidden} V={args.vocab} B={args.batch} T={args.seq} "
    f"fp32, remat={args.remat}"
  )
  report.record_comparison(
    args.append,
    "bench/model_fwd_bwd.py",
    HEADING,
    [config, f"{c.ours_median_s:.3f}", f"{c.theirs_median_s:.3f}"],
    c,
    report.torch_side_note(args.theirs_malloc),
  )
  return c.as_dict()


if __name__ == "__main__":
  cli.run(main)
