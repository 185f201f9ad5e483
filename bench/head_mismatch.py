"""Trainer-vs-server logprob gap from the LM head, fp32-master trainer against a bf16-param server
(the Qwen3.5 RL configs' dtypes), with and without the fp32 head weight on the server.

Per family (a tiny Qwen3 with tied embeddings, a tiny Qwen3.5 with an untied head) and side:
  fixed    the server holds the trainer's fp32 head weight (DtypePolicy.head_weight: what the
           weight sync now serves);
  bf16     the head weight round-tripped through bf16 first, as the served tree held it before
           (a bf16 param cast back to fp32 in the engine's prepare).
The trainer (fp32 params, `--compute` compute dtype, fp32 head, reference attention as the paged
decode computes) is synced into a real in-process JetStream server (loop/weight_sync.WeightSync,
gRPC on loopback), which samples `--tokens` tokens for each of `--prompts` prompts; the gap is
the served logprob of each sampled token against the trainer's: mean |delta logp| and the k3
mismatch KL(mu || pi) per token, r - 1 - log r with r = pi / mu (what every RL step logs as
mismatch_abs_logp / mismatch_kl_k3). `--compute float32` with `--bf16_body` rounds the trainer's
body weights to bf16 values so that the server's bf16 params are lossless and only the head
differs (what tests/inference/test_head_mismatch.py asserts).

  python3 bench/head_mismatch.py [--compute bfloat16] [--prompts 16] [--tokens 32] [--tiny]
One JSON line per (family, side) and a markdown table on stdout; not timed (any machine).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

from tmax_jax import cli, sharding  # noqa: E402
from tmax_jax.inference import engine as engine_lib  # noqa: E402
from tmax_jax.inference import sampling  # noqa: E402
from tmax_jax.inference import server as server_lib  # noqa: E402
from tmax_jax.inference.client import ClientConfig, RolloutClient  # noqa: E402
from tmax_jax.loop import WeightSync, served_target  # noqa: E402
from tmax_jax.models import ModelConfig, registry  # noqa: E402
from tmax_jax.models import logprobs as logprobs_lib  # noqa: E402
from tmax_jax.models.qwen3_5 import Qwen3_5Config, qwen3_5  # noqa: E402

SHAPE = dict(
  vocab_size=512,
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
  max_position_embeddings=256,
  attention_impl="reference",  # the softmax-then-PV order of the paged decode
)
ENGINE = engine_lib.EngineConfig(max_concurrent_decodes=8, max_len=128, max_prefill_length=64)


def toy_configs() -> dict[str, ModelConfig]:
  """family -> a tiny fp32 config: Qwen3 with tied embeddings (the head is the embedding
  transposed), Qwen3.5 (one Gated DeltaNet + one gated attention layer) with an untied head."""
  fam = Qwen3_5Config(
    layer_types=("linear_attention", "full_attention"),
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    chunk_size=16,
  )
  return {
    "qwen3": ModelConfig(tie_word_embeddings=True, **SHAPE),
    "qwen3_5": qwen3_5("0.8b", tie_word_embeddings=False, family_config=fam, **SHAPE),
  }


def head_leaf(cfg: ModelConfig) -> str:
  """The param the head's weight is: the embedding when tied, else lm_head's kernel."""
  return "embed_tokens" if cfg.tie_word_embeddings else "lm_head"


def _is_head(cfg: ModelConfig, path) -> bool:
  return head_leaf(cfg) in jax.tree_util.keystr(path)


def trainer_params(cfg: ModelConfig, seed: int, bf16_body: bool):
  """fp32 params at random init, the head weight scaled up so logits are far from uniform; with
  `bf16_body` every other weight is rounded to a bf16 value (kept in fp32)."""

  def prep(path, x):
    if _is_head(cfg, path):
      return x * 4.0
    return x.astype(jnp.bfloat16).astype(jnp.float32) if bf16_body else x

  params = registry.init_params(cfg, jax.random.key(seed))
  return jax.tree_util.tree_map_with_path(prep, params)


def bf16_head(cfg: ModelConfig, params):
  """The params with the head weight rounded through bf16: what a bf16 server served before."""
  return jax.tree_util.tree_map_with_path(
    lambda p, x: x.astype(jnp.bfloat16).astype(x.dtype) if _is_head(cfg, p) else x, params
  )


def trainer_logprobs(cfg: ModelConfig, params, prompt, completion) -> np.ndarray:
  """log pi of each completion token by the trainer's path (full forward, fp32 head)."""
  ids = jnp.asarray([list(prompt) + list(completion)], jnp.int32)
  pos = jnp.arange(ids.shape[1], dtype=jnp.int32)[None]
  hidden, _ = registry.build_model(cfg).apply({"params": params}, ids, pos, jnp.ones_like(ids))
  lp, _ = logprobs_lib.token_logprobs(
    hidden[:, :-1],
    registry.head_weight(params, cfg),
    ids[:, 1:],
    chunk_size=16,
    head_dtype=cfg.dtypes.head,
  )
  return np.asarray(lp[0, len(prompt) - 1 :])


def _sample(address: str, prompts, tokens: int, seed: int):
  async def go():
    async with RolloutClient(address, ClientConfig(timeout_s=300)) as c:
      sp = sampling.SamplingParams(seed=seed)
      return await asyncio.gather(*[c.generate(p, tokens, sp) for p in prompts])

  return asyncio.run(go())


def _gap(trainer_cfg, params, prompts, outs) -> dict:
  per_prompt_abs, k3 = [], []
  for p, o in zip(prompts, outs, strict=True):
    mu = np.asarray(o.logprobs, np.float64)
    log_r = trainer_logprobs(trainer_cfg, params, p, o.token_ids).astype(np.float64) - mu
    per_prompt_abs.append(float(np.mean(np.abs(log_r))))
    k3.extend((np.exp(log_r) - 1.0 - log_r).tolist())
  return {
    "mean_abs_logp": float(np.mean(per_prompt_abs)),
    "median_prompt_abs_logp": float(np.median(per_prompt_abs)),
    "mean_k3": float(np.mean(k3)),
    "per_prompt_abs_logp": per_prompt_abs,
  }


def gaps(trainer_cfg, params, served_cfg, prompts, tokens: int, seed: int) -> dict[bool, dict]:
  """fixed -> the gap: one real server (bf16 params) on device 0, first holding the head as the
  served tree did before (bf16-rounded, version 0), then the trainer's fp32 head pushed through
  the RL loop's weight sync (version 1)."""
  device = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("replica", "tensor"))
  sync = WeightSync(
    sharding.make_mesh(devices=jax.devices()[:1]), served_target(served_cfg, device)
  )
  first = sync(bf16_head(trainer_cfg, params))
  engine = engine_lib.TmaxEngine(served_cfg, ENGINE, lambda: first, mesh=device)
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=0))
  out = {}
  try:
    out[False] = _gap(trainer_cfg, params, prompts, _sample(server.address, prompts, tokens, seed))
    server.driver.update_weights(sync(params), 1)
    out[True] = _gap(trainer_cfg, params, prompts, _sample(server.address, prompts, tokens, seed))
  finally:
    server.stop()
  return out


def rows(compute: str, bf16_body: bool, n_prompts: int, tokens: int, seed: int) -> list[dict]:
  rng = np.random.default_rng(seed)
  out = []
  for family, cfg in toy_configs().items():
    trainer_cfg = cfg.with_dtypes(compute_dtype=compute, head_dtype="float32")
    served_cfg = trainer_cfg.with_dtypes(param_dtype="bfloat16")
    params = trainer_params(trainer_cfg, seed, bf16_body)
    prompts = [
      rng.integers(1, cfg.vocab_size, int(rng.integers(4, 40))).tolist() for _ in range(n_prompts)
    ]
    for fixed, measured in gaps(trainer_cfg, params, served_cfg, prompts, tokens, seed).items():
      row = {
        "family": family,
        "tied": cfg.tie_word_embeddings,
        "compute": compute,
        "bf16_body": bf16_body,
        "server_head": "fp32 (fixed)" if fixed else "bf16-rounded",
        **measured,
      }
      out.append(row)
      print(json.dumps({k: v for k, v in row.items() if k != "per_prompt_abs_logp"}), flush=True)
  return out


def table(results: list[dict]) -> str:
  lines = [
    "| family | compute | server head weight | mean abs dlogp | median prompt | mean k3 |",
    "|---|---|---|---|---|---|",
  ]
  for r in results:
    lines.append(
      f"| {r['family']} ({'tied' if r['tied'] else 'untied'}) | {r['compute']} | "
      f"{r['server_head']} | {r['mean_abs_logp']:.2e} | {r['median_prompt_abs_logp']:.2e} | "
      f"{r['mean_k3']:.2e} |"
    )
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument(
    "--compute", default="bfloat16", choices=("bfloat16", "float32"), help="compute dtype"
  )
  p.add_argument("--bf16_body", action="store_true", help="round the body weights to bf16 values")
  p.add_argument("--prompts", type=int, default=16, help="prompts per family")
  p.add_argument("--tokens", type=int, default=32, help="sampled tokens per prompt")
  p.add_argument("--seed", type=int, default=0, help="params, prompts and sampling seed")
  p.add_argument("--tiny", action="store_true", help="2 prompts x 8 tokens (checks the script)")
  args = p.parse_args(argv)
  n, tokens = (2, 8) if args.tiny else (args.prompts, args.tokens)
  print(table(rows(args.compute, args.bf16_body, n, tokens, args.seed)))


if __name__ == "__main__":
  cli.run(main)
