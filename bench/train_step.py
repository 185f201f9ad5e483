"""CPU train-step throughput: our jitted DPPO step vs a transformers + torch AdamW step on the same
small Qwen3 config and batch (fp32 both; same loss: token-level DPPO binary TV; global-norm clip 1.0).

  python bench/train_step.py [--steps 5] [--out r.json]   # prints a BENCHMARKS.md table row
"""

import argparse
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from tmax_jax.models import registry  # noqa: E402
from tmax_jax.models.config import ModelConfig  # noqa: E402
from tmax_jax.train import step as step_lib  # noqa: E402
from tmax_jax.train.config import OptimizerConfig, TrainConfig  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import report  # noqa: E402  (bench/report.py)
from gpu_train_step import random_batch  # noqa: E402

SMALL = dict(vocab_size=2048, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64, tie_word_embeddings=False)
TINY = dict(SMALL, vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            head_dim=8)


def jax_step_time(cfg: ModelConfig, batch, steps: int) -> float:
  tcfg = TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-5), logprob_chunk_size=256)
  trainer = step_lib.Trainer(registry.build_model(cfg), cfg, tcfg)
  state = trainer.init_state(registry.init_params(cfg, jax.random.key(0)))
  dev = trainer.to_device(batch)
  state, _ = trainer.step(state, dev)  # compile
  times = []
  for _ in range(steps):
    state, m = trainer.step(state, dev)
    times.append(m["step_time_s"])
  return float(np.median(times))


def torch_step_time(cfg: ModelConfig, batch, steps: int) -> float:
  import torch
  import transformers

  torch.manual_seed(0)
  torch.set_num_threads(2)  # the CPU machines have 2 cores; same as XLA
  hf = transformers.Qwen3Config(**{k: getattr(cfg, k) for k in SMALL}, rms_norm_eps=cfg.rms_norm_eps,
                                rope_theta=cfg.rope_theta, attention_bias=False)
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

  return report.time_it(step, steps)[0]


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--batch", type=int, default=4)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--tiny", action="store_true", help="a tiny config (tests)")
  ap.add_argument("--out", default=None)
  args = ap.parse_args(argv)
  cfg = ModelConfig(**(TINY if args.tiny else SMALL))
  b, s = (2, 32) if args.tiny else (args.batch, args.seq)
  batch = random_batch(cfg, b, s, 0)
  t_jax = jax_step_time(cfg, batch, args.steps)
  t_torch = torch_step_time(cfg, batch, args.steps)
  tokens = b * s
  result = {"batch": b, "seq": s, "config": TINY if args.tiny else SMALL,
            "jax_tokens_per_s": tokens / t_jax, "torch_tokens_per_s": tokens / t_torch,
            "ratio": t_torch / t_jax}
  print(json.dumps(result, indent=1))
  print(f"| train step, Qwen3-shaped D={cfg.hidden_size} L={cfg.num_hidden_layers} "
        f"V={cfg.vocab_size}, B x S = {b} x {s}, fp32, CPU | {tokens / t_jax:,.0f} tok/s | "
        f"{tokens / t_torch:,.0f} tok/s (transformers+torch AdamW) | {t_torch / t_jax:.2f}x |")
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
  main()
