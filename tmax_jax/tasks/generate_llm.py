"""Writes tasks with an LLM behind any OpenAI-compatible endpoint, keeping only those whose
environment builds, whose smoke test runs and whose oracle passes in a sandbox.

  python3 -m tmax_jax.tasks.generate_llm --base_url http://127.0.0.1:8000/v1 --model M \
      --n 100 --seed 0 --out tasks/   [--api_key_env OPENAI_API_KEY] [--backend bubblewrap]
Writes kept tasks to <out>/<sample id>-<name>/, one line per sample to <out>/generation.jsonl and
<out>/summary.json (kept/rejected counts, domain balance score exp(H)/N). One task at a time; the
resumable, parallel, calibrated version is `python3 -m tmax_jax.pipeline`.
Exit status: 0 done, 2 the endpoint is unusable before any work (unreachable, wrong key or model),
3 it became unusable during the run (the samples written so far are kept).
"""

from __future__ import annotations

import json
import os
import sys

from tmax_jax import cli
from tmax_jax.errors import UserError
from tmax_jax.tasks.generator.axes import sample_many
from tmax_jax.tasks.generator.llm import ChatClient, ChatConfig, EndpointError
from tmax_jax.tasks.generator.pipeline import GenerationConfig, generate_dataset
from tmax_jax.tasks.runner import RunnerConfig


def main(argv: list[str] | None = None) -> int:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument(
    "--base_url", required=True, help="OpenAI-compatible endpoint, e.g. http://h:8000/v1"
  )
  p.add_argument("--model", required=True, help="model name the endpoint serves")
  p.add_argument(
    "--api_key_env", default=None, help="name of the environment variable holding the API key"
  )
  p.add_argument("--n", type=int, default=10, help="number of axis samples to write tasks for")
  p.add_argument("--seed", type=int, default=0, help="axis sampling seed")
  p.add_argument("--start", type=int, default=0, help="first sample index (to resume or shard)")
  p.add_argument("--out", required=True, help="directory the kept tasks are written to")
  p.add_argument(
    "--max_attempts",
    type=int,
    default=GenerationConfig.max_attempts,
    help="LLM attempts per sample (each failure's reason goes back to the model)",
  )
  p.add_argument("--backend", default=None, help="sandbox backend (default: the best available)")
  p.add_argument(
    "--allow_failing_oracle", action="store_true", help="keep tasks whose oracle scores < 1"
  )
  args = p.parse_args(argv)
  key = os.environ.get(args.api_key_env) if args.api_key_env else None
  client = ChatClient(ChatConfig(base_url=args.base_url, model=args.model, api_key=key))
  config = GenerationConfig(
    max_attempts=args.max_attempts,
    require_oracle_pass=not args.allow_failing_oracle,
    runner=RunnerConfig(backend=args.backend),
  )
  try:
    client.preflight()
  except EndpointError as err:
    raise UserError(f"--base_url={args.base_url}: {err}") from err
  try:
    summary = generate_dataset(
      sample_many(args.n, args.seed, start=args.start), client, args.out, config
    )
  except EndpointError as err:
    print(f"error: stopped, the endpoint became unusable: {err}", file=sys.stderr)
    return 3
  print(json.dumps(summary))
  return 0


if __name__ == "__main__":
  cli.run(main)
