"""Packed RL batches vs one row per trajectory: the same DPPO step on the same uneven batch of
episodes (lognormal lengths, as agent trajectories are: many short, a long tail up to seq_len),
timed side by side (bench/report.compare, sides alternated). Reports real (non-padding) tokens/s
of both and the padding fraction of each batch form.

  python bench/packing.py [--episodes 32 --seq 512 --budget 2048 --pairs 5] [--record BENCHMARKS.md]
  python bench/packing.py --tiny    # a tiny config on CPU, checks the script end to end
"""

import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tmax_jax import cli
from tmax_jax.models import ModelConfig, registry  # noqa: E402
from tmax_jax.train import OptimizerConfig, PackingConfig, TrainConfig  # noqa: E402
from tmax_jax.train import batch as batch_lib  # noqa: E402
from tmax_jax.train import step as step_lib  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import report  # noqa: E402  (bench/report.py)
from train_step import SMALL, TINY  # noqa: E402

HEADING = (
  "\n## Packed RL batches (bench/packing.py)\n\n"
  "| model, batch | one row per trajectory | packed micro-batches | ratio |\n"
  "|---|---|---|---|\n"
)


def episodes(n: int, seq_len: int, vocab: int, seed: int) -> list[batch_lib.Trajectory]:
  """n trajectories, lengths lognormal (median seq_len / 8) clipped to [16, seq_len]; the first
  10% of each is prompt (no loss)."""
  rng = np.random.default_rng(seed)
  lengths = np.clip(rng.lognormal(np.log(seq_len / 8), 1.0, n), 16, seq_len).astype(int)
  return [
    batch_lib.Trajectory(
      tokens=rng.integers(0, vocab, length),
      loss_mask=(np.arange(length) >= length // 10).astype(np.float32),
      behaviour_logp=-np.log(vocab) + rng.uniform(-0.5, 0.5, length),
      advantage=float(rng.choice([-1.0, 1.0])),
    )
    for length in lengths
  ]


def main(argv=None) -> None:
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument("--episodes", type=int, default=32, help="episodes per batch")
  ap.add_argument("--seq", type=int, default=512, help="longest episode (tokens)")
  ap.add_argument("--budget", type=int, default=2048, help="token slots per packed micro-batch")
  ap.add_argument(
    "--pairs", type=int, default=report.MIN_PAIRS, help="alternated packed/padded pairs"
  )
  ap.add_argument("--tiny", action="store_true", help="a tiny config (tests)")
  ap.add_argument("--record", default="", help="append the row to this BENCHMARKS.md")
  ap.add_argument("--out", default=None, help="JSON output path")
  args = ap.parse_args(argv)
  cfg = ModelConfig(**(TINY if args.tiny else SMALL))
  n, s, budget = (16, 64, 256) if args.tiny else (args.episodes, args.seq, args.budget)
  trajs = episodes(n, s, cfg.vocab_size, seed=0)
  rows = [s // 4, s // 2, s]
  base = TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-5), logprob_chunk_size=256)
  model = registry.build_model(cfg)
  params = registry.init_params(cfg, jax.random.key(0))
  sides = {}
  for name, tcfg in (
    ("fixed", base),
    ("packed", base.replace(packing=PackingConfig(budget, tuple(rows)))),
  ):
    trainer = step_lib.Trainer(model, cfg, tcfg)
    batch = trainer.make_batch(trajs, s, num_rows=n, pack_rows=False)
    sides[name] = {
      "trainer": trainer,
      "batch": batch,
      "state": trainer.init_state(jax.tree.map(jnp.copy, params)),
    }

  def run(name):
    def call():
      side = sides[name]
      side["state"], side["metrics"] = side["trainer"].step(side["state"], side["batch"])

    return call

  cmp = report.compare(run("packed"), run("fixed"), pairs=args.pairs)
  tokens = sum(len(t.tokens) for t in trajs)
  result = {
    "episodes": n,
    "seq": s,
    "budget": budget,
    "row_lengths": rows,
    "tokens": tokens,
    "fixed_padding": sides["fixed"]["metrics"]["padding_fraction"],
    "packed_padding": sides["packed"]["metrics"]["padding_fraction"],
    "packed_micro_batches": sides["packed"]["metrics"]["micro_batches"],
    "fixed_tokens_per_s": tokens / cmp.theirs_median_s,
    "packed_tokens_per_s": tokens / cmp.ours_median_s,
    **cmp.as_dict(),
  }
  print(json.dumps(result, indent=1))
  row = (
    f"| Qwen3-shaped D={cfg.hidden_size} L={cfg.num_hidden_layers} V={cfg.vocab_size}, "
    f"{n} episodes <= {s} tokens, fp32 CPU | {result['fixed_tokens_per_s']:,.0f} tok/s, "
    f"{result['fixed_padding']:.0%} padding | {result['packed_tokens_per_s']:,.0f} tok/s, "
    f"{result['packed_padding']:.0%} padding, {budget} slots x "
    f"{result['packed_micro_batches']:.0f} | {cmp.ratio_text()}, {cmp.load_text()} |"
  )
  report.record_row(
    pathlib.Path(args.record) if args.record else None,
    "bench/packing.py",
    HEADING,
    row,
    loads=cmp.busy_readings,
  )
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
  cli.run(main)
