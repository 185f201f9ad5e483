"""CPU train-step throughput: our jitted DPPO step vs a transformers + torch AdamW step on the same
small Qwen3 config and batch (fp32 both; same loss: token-level DPPO binary TV; global-norm clip
1.0).

Timed side by side with report.compare (a warm-up step each, then >= 5 alternated pairs), the torch
side in its own process (report.torch_side: glibc malloc as torch users have it, or with
--theirs_malloc tuned as importing tmax_jax sets it); prints a BENCHMARKS.md table row, and with
--append adds it unless the machine was busy.

  python bench/train_step.py [--pairs 5] [--theirs_malloc default|tuned] [--append BENCHMARKS.md]
    [--out r.json]
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from tmax_jax import cli
from tmax_jax.models import ModelConfig, registry  # noqa: E402
from tmax_jax.train import OptimizerConfig, TrainConfig  # noqa: E402
from tmax_jax.train import step as step_lib  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import report  # noqa: E402  (bench/report.py)
from gpu_train_step import random_batch  # noqa: E402

SMALL = dict(
  vocab_size=2048,
  hidden_size=256,
  intermediate_size=768,
  num_hidden_layers=4,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=64,
  tie_word_embeddings=False,
)
TINY = dict(
  SMALL, vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, head_dim=8
)


def jax_step(cfg: ModelConfig, batch):
  """-> one call = one jitted Trainer.step (blocks: the metrics come back as floats)."""
  tcfg = TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-5), logprob_chunk_size=256)
  trainer = step_lib.Trainer(registry.build_model(cfg), cfg, tcfg)
  state = [trainer.init_state(registry.init_params(cfg, jax.random.key(0)))]
  dev = trainer.to_device(batch)

  def step():
    state[0], _ = trainer.step(state[0], dev)  # the state is donated: keep the new one

  return step


def torch_step(cfg: ModelConfig, batch):
  """-> one call = forward, DPPO loss, backward, clip, AdamW step (eager torch)."""
  import torch
  import transformers

  torch.manual_seed(0)
  torch.set_num_threads(2)  # the CPU machines have 2 cores; same as XLA
  hf = transformers.Qwen3Config(
    **{k: getattr(cfg, k) for k in SMALL},
    rms_norm_eps=cfg.rms_norm_eps,
    rope_theta=cfg.rope_theta,
    attention_bias=False,
  )
  model = transformers.Qwen3ForCausalLM(hf).float().train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
  tokens = torch.as_tensor(batch.tokens, dtype=torch.long)
  targets = torch.as_tensor(batch.targets, dtype=torch.long)
  mask = torch.as_tensor(batch.loss_mask)
  blp = torch.as_tensor(batch.behaviour_logp)
  adv = torch.as_tensor(batch.advantages)

  def step():
    logits = model(input_ids=tokens).logits.float()
    logp = torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    ratio = torch.exp(torch.where(mask > 0, logp - blp, torch.zeros_like(logp)))
    tv = (logp.detach().exp() - blp.exp()).abs()
    away = ((adv > 0) & (ratio > 1)) | ((adv < 0) & (ratio < 1))
    kept = (mask > 0) & ~((tv > 0.1) & away)
    loss = torch.where(kept, -adv * ratio, torch.zeros_like(ratio)).sum() / mask.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()

  return step


HEADING = (
  "\n## DPPO train step on CPU vs transformers + torch AdamW (bench/train_step.py)\n\n"
  "`python3 bench/train_step.py`: tokens/s of one full optimizer step on the same random packed "
  "batch, fp32 both, median over alternated pairs; ratio = median of the per-pair ratios "
  "(> 1: ours faster) with its min-max.\n\n"
  "| when (UTC) | config | ours | transformers + torch | ratio | setup |\n"
  "|---|---|---|---|---|---|\n"
)


def main(argv=None) -> dict:
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument(
    "--pairs", type=int, default=report.MIN_PAIRS, help="alternated ours/theirs pairs"
  )
  ap.add_argument("--batch", type=int, default=4, help="batch size")
  ap.add_argument("--seq", type=int, default=256, help="sequence length")
  ap.add_argument("--tiny", action="store_true", help="a tiny config (tests)")
  ap.add_argument(
    "--theirs_malloc",
    choices=report.MALLOC_CHOICES,
    default="default",
    help="glibc malloc of the torch process: as torch users have it, or tuned as ours",
  )
  ap.add_argument(
    "--append",
    type=pathlib.Path,
    default=None,
    help="BENCHMARKS.md to append the row to (quiet machine only)",
  )
  ap.add_argument("--out", default=None, help="JSON output path")
  args = ap.parse_args(argv)
  shape = TINY if args.tiny else SMALL
  cfg = ModelConfig(**shape)
  b, s = (2, 32) if args.tiny else (args.batch, args.seq)
  batch = random_batch(cfg, b, s, 0)
  with report.torch_side("train_step:torch_step", cfg, batch, malloc=args.theirs_malloc) as theirs:
    c = report.compare(jax_step(cfg, batch), theirs, pairs=args.pairs, timed=(False, True))
  tokens = b * s
  result = {
    "batch": b,
    "seq": s,
    "config": shape,
    "jax_tokens_per_s": tokens / c.ours_median_s,
    "torch_tokens_per_s": tokens / c.theirs_median_s,
    **c.as_dict(),
  }
  print(json.dumps(result, indent=1))
  config = (
    f"Qwen3 D={cfg.hidden_size} L={cfg.num_hidden_layers} V={cfg.vocab_size}, "
    f"B x S = {b} x {s}, fp32, remat={cfg.remat_policy}"
  )
  report.record_comparison(
    args.append,
    "bench/train_step.py",
    HEADING,
    [config, f"{tokens / c.ours_median_s:,.0f} tok/s", f"{tokens / c.theirs_median_s:,.0f} tok/s"],
    c,
    report.torch_side_note(args.theirs_malloc),
  )
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
  return result


if __name__ == "__main__":
  cli.run(main)
