"""A small, complete RL training loop on a tiny Qwen3-shaped model, for tests and demos.

Task (reward computed in-process): after a random prompt, the policy samples `response_len`
tokens; reward 1 if the response contains `target_token`. Sampling uses jax.random.categorical on
the model's own fp32-head logits, and those logprobs are the behaviour logprobs (on-policy DPPO).
Everything is seeded; the data position is the step index, so a resumed run continues exactly.

`python -m tests.train.toy --workdir DIR --steps N [--save_every K]` resumes from DIR's latest
checkpoint, prints `step <n> saved` lines, writes DIR/metrics.jsonl and DIR/final_params.npz.
`--synthetic` trains on fixed random trajectories instead (used by the multi-process test: each
process feeds its own rows of the global batch).
"""

import argparse
import dataclasses
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

from tmax_jax import rl
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig
from tmax_jax.train import batch as batch_lib
from tmax_jax.train import checkpoint as ckpt_lib
from tmax_jax.train import distributed
from tmax_jax.train import step as step_lib
from tmax_jax.train.config import CheckpointConfig, LossConfig, OptimizerConfig, TrainConfig
from tmax_jax.train.metrics import MetricsWriter


@dataclasses.dataclass(frozen=True)
class ToyConfig:
  vocab_size: int = 16
  hidden_size: int = 32
  num_layers: int = 2
  prompt_len: int = 3
  response_len: int = 6
  prompts_per_step: int = 4
  group_size: int = 8
  target_token: int = 5
  learning_rate: float = 1e-2
  policy_loss: str = "dppo"
  micro_batches: int = 2
  seed: int = 0


def model_config(toy: ToyConfig) -> ModelConfig:
  """A tiny Qwen3 (fp32 everywhere so CPU runs are exactly reproducible)."""
  return ModelConfig(
    vocab_size=toy.vocab_size,
    hidden_size=toy.hidden_size,
    intermediate_size=2 * toy.hidden_size,
    num_hidden_layers=toy.num_layers,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    tie_word_embeddings=False,
  )


def train_config(toy: ToyConfig, steps: int) -> TrainConfig:
  return TrainConfig(
    optimizer=OptimizerConfig(learning_rate=toy.learning_rate, total_steps=max(steps, 1)),
    loss=LossConfig(policy_loss=toy.policy_loss),
    micro_batches=toy.micro_batches,
    logprob_chunk_size=8,
    seed=toy.seed,
  )


def make_sampler(model, mcfg: ModelConfig, toy: ToyConfig):
  """jit (params, prompts [N, P], key) -> (tokens [N, P+R], behaviour logp [N, R])."""
  p_len, r_len = toy.prompt_len, toy.response_len

  @jax.jit
  def sample(params, prompts, key):
    n = prompts.shape[0]
    tokens = jnp.zeros((n, p_len + r_len), jnp.int32).at[:, :p_len].set(prompts)
    positions = jnp.broadcast_to(jnp.arange(p_len + r_len), tokens.shape)
    segs = jnp.ones_like(tokens)

    def body(i, carry):
      tokens, logp = carry
      hidden, _ = model.apply({"params": params}, tokens, positions, segs)
      h = jax.lax.dynamic_slice_in_dim(hidden, p_len + i - 1, 1, axis=1)  # [N, 1, D]
      logits = logprobs_lib.full_logits(h, registry.head_weight(params, mcfg))[:, 0]  # [N, V]
      tok = jax.random.categorical(jax.random.fold_in(key, i), logits)  # [N]
      lp = jax.nn.log_softmax(logits)[jnp.arange(n), tok]
      return tokens.at[:, p_len + i].set(tok), logp.at[:, i].set(lp)

    return jax.lax.fori_loop(0, r_len, body, (tokens, jnp.zeros((n, r_len), jnp.float32)))

  return sample


def rollout_batch(toy: ToyConfig, tokens: np.ndarray, blp: np.ndarray):
  """Sampled sequences -> (packed TrainBatch, rewards [N])."""
  p_len = toy.prompt_len
  rewards = (tokens[:, p_len:] == toy.target_token).any(axis=1).astype(np.float32)
  groups = np.repeat(np.arange(toy.prompts_per_step), toy.group_size)
  adv = np.asarray(rl.get("advantage", "centered")(rewards, groups))
  mask = np.r_[np.zeros(p_len), np.ones(toy.response_len)].astype(np.float32)
  trajs = [
    batch_lib.Trajectory(tokens[i], mask, np.r_[np.zeros(p_len), blp[i]], float(adv[i]))
    for i in range(tokens.shape[0])
  ]
  seq = tokens.shape[1]
  n_rows = -(-tokens.shape[0] // 2)  # two trajectories per packed row
  return batch_lib.pack(trajs, 2 * seq, num_rows=n_rows), rewards


def synthetic_batch(toy: ToyConfig, step: int, rows: int, seq_len: int) -> batch_lib.TrainBatch:
  """Deterministic random packed rows for `step` (the same on every process)."""
  rng = np.random.default_rng([toy.seed, step])
  trajs = []
  for _ in range(rows * 2):
    n = int(rng.integers(4, seq_len // 2 + 1))
    trajs.append(
      batch_lib.Trajectory(
        rng.integers(0, toy.vocab_size, n),
        (np.arange(n) >= 2).astype(np.float32),
        -rng.uniform(1.0, 4.0, n),
        float(rng.normal()),
      )
    )
  return batch_lib.pack(trajs, seq_len, num_rows=rows)


def run(
  workdir: str,
  steps: int,
  toy: ToyConfig = ToyConfig(),
  save_every: int = 0,
  synthetic: bool = False,
  global_rows: int = 8,
  seq_len: int = 16,
  progress=print,
):
  """Trains to `steps` (resuming from workdir's checkpoint if any) -> (state, metrics rows)."""
  work = pathlib.Path(workdir)
  mcfg, cfg = model_config(toy), train_config(toy, steps)
  model = registry.build_model(mcfg)
  mesh = distributed.sharding.make_mesh(data=-1, fsdp=1) if jax.device_count() > 1 else None
  trainer = step_lib.Trainer(model, mcfg, cfg, mesh)
  shard = None if mesh is None else distributed.replicated(mesh)
  state = trainer.init_state(registry.init_params(mcfg, jax.random.key(toy.seed), shard))
  ckpt, start = None, 0
  if save_every:
    ckpt = ckpt_lib.Checkpointer(
      CheckpointConfig(directory=str(work / "ckpt"), save_every=save_every, keep_last=2)
    )
    if ckpt.latest_step() is not None:
      state, data, _ = ckpt.restore(state)
      start = int(data["next_step"])
      progress(f"resumed at step {start}")
  sample = make_sampler(model, mcfg, toy)
  rows = []
  with MetricsWriter(str(work / "metrics.jsonl")) as writer:
    for step in range(start, steps):
      if synthetic:
        batch = synthetic_batch(toy, step, global_rows, seq_len)
        batch = jax.tree.map(lambda x: x[distributed.process_rows(global_rows)], batch)
        extra = {}
      else:
        key, sample_key = jax.random.split(state.key())
        prompts = np.random.default_rng([toy.seed, step]).integers(
          0, toy.vocab_size, (toy.prompts_per_step, toy.prompt_len)
        )
        prompts = np.repeat(prompts, toy.group_size, axis=0)
        tokens, blp = jax.device_get(sample(state.params, prompts, sample_key))
        batch, rewards = rollout_batch(toy, tokens, blp)
        state = state.replace(rng=jax.random.key_data(key))
        extra = {"reward_mean": float(rewards.mean())}
      state, metrics = trainer.step(state, batch)
      metrics.update(extra)
      writer.write(step, metrics)
      rows.append(metrics)
      if ckpt is not None and ckpt.save(step + 1, state, {"next_step": step + 1}):
        progress(f"step {step + 1} saved")
      else:
        progress(f"step {step + 1} done")
  if ckpt is not None:
    ckpt.close()
  return state, rows


def save_params(path: str, params) -> None:
  """Flat {path: array} npz of the params (process 0 only; arrays are replicated)."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  arrays = {jax.tree_util.keystr(k): np.asarray(jax.device_get(v)) for k, v in flat}
  if jax.process_index() == 0:
    tmp = pathlib.Path(path).with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--steps", type=int, required=True)
  ap.add_argument("--save_every", type=int, default=0)
  ap.add_argument("--synthetic", action="store_true")
  ap.add_argument("--global_rows", type=int, default=8)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--coordinator", default=None)
  ap.add_argument("--num_processes", type=int, default=None)
  ap.add_argument("--process_id", type=int, default=None)
  args = ap.parse_args(argv)
  distributed.initialize(args.coordinator, args.num_processes, args.process_id)
  state, _ = run(
    args.workdir,
    args.steps,
    ToyConfig(seed=args.seed),
    args.save_every,
    args.synthetic,
    args.global_rows,
    progress=lambda s: print(s, flush=True),
  )
  save_params(str(pathlib.Path(args.workdir) / "final_params.npz"), state.params)
  print("finished", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
