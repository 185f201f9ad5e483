"""The TMAX task pipeline (tmax_jax/pipeline/__init__.py): axis samples written into tasks by an
OpenAI-compatible model, built, validated, calibrated against a reference policy, decontaminated
and published. Flag defaults come from the config dataclasses. Exit status: 0 done; 2 (`error:
...`) a flag or file is wrong, an endpoint is unusable before any work (unreachable, wrong key,
URL or model) or the output directory cannot be used; 3 the run stopped (an endpoint became
unusable, or tasks failed on it): what finished is kept, `--resume` continues."""

from __future__ import annotations

import argparse
import os
import sys

from tmax_jax import cli
from tmax_jax.pipeline.config import UNTIL, CalibrationConfig, PipelineConfig
from tmax_jax.pipeline.run import EXIT_UNUSABLE, run
from tmax_jax.pipeline.state import StateError
from tmax_jax.tasks.generator.llm import ChatConfig
from tmax_jax.tasks.generator.pipeline import GenerationConfig
from tmax_jax.tasks.runner import RunnerConfig

P, C, W, G, R = PipelineConfig, CalibrationConfig, ChatConfig, GenerationConfig, RunnerConfig


def _parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(prog="python3 -m tmax_jax.pipeline", description=cli.description(__doc__))
  a = p.add_argument
  a("--endpoint", required=True, help="the writer's OpenAI-compatible base URL (http://HOST/v1)")
  a("--model", required=True, help="the writer model's name at that endpoint")
  a("--api_key_env", default="", help="environment variable holding the writer's API key")
  a("--out", required=True, help="output directory (state, work, published set, reports)")
  a("--n", type=int, default=P.n, help="number of tasks (axis samples start..start+n-1)")
  a("--seed", type=int, default=P.seed, help="axis sampler seed")
  a("--start", type=int, default=P.start, help="first sample index (shards)")
  a("--workers", type=int, default=P.workers, help="concurrent writer calls")
  a(
    "--sandbox_workers",
    type=int,
    default=P.sandbox_workers,
    help="concurrent builds / validations / calibration episodes (0 = CPU count)",
  )
  a("--resume", action="store_true", help="continue the run in --out (finished stages are kept)")
  a("--until", choices=UNTIL, default=P.until, help="the last stage this run does")
  a(
    "--max_attempts",
    type=int,
    default=G.max_attempts,
    help="writer calls per task (the parse error is fed back on each retry)",
  )
  a("--temperature", type=float, default=W.temperature, help="writer sampling temperature")
  a("--max_tokens", type=int, default=W.max_tokens, help="writer reply limit")
  a("--timeout_s", type=float, default=W.timeout_s, help="per request attempt")
  a(
    "--max_retries",
    type=int,
    default=W.max_retries,
    help="client retries with backoff on 429/5xx/timeouts/connection errors",
  )
  a(
    "--max_endpoint_failures",
    type=int,
    default=P.max_endpoint_failures,
    help="consecutive tasks failing on an endpoint (after retries) that stop the run",
  )
  a("--backend", default=None, help="sandbox backend (bubblewrap, podman; default: auto)")
  a("--memory_mb", type=int, default=R.memory_mb, help="sandbox memory limit")
  a(
    "--no_noop_check",
    action="store_true",
    help="keep tasks whose verifier passes when the agent does nothing",
  )
  a(
    "--benchmark",
    action="append",
    default=[],
    help="benchmark task directory (TB1/TB2) to decontaminate against; repeatable",
  )
  a("--taxonomy", default=P.taxonomy, help="a taxonomy.json other than the shipped one")
  a("--no_progress", action="store_true", help="no progress bars")
  _calibration_flags(p.add_argument_group("calibration (the reference policy)").add_argument)
  return p


def _calibration_flags(a) -> None:
  a("--no_calibrate", action="store_true", help="skip difficulty calibration")
  a(
    "--calibrate_endpoint",
    default=C.base_url,
    help="the reference policy's base URL ('' = --endpoint)",
  )
  a("--calibrate_model", default=C.model, help="the reference policy ('' = --model)")
  a("--calibrate_api_key_env", default="", help="environment variable with its API key")
  a("--k", type=int, default=C.k, help="calibration episodes per task and round")
  a(
    "--band",
    type=float,
    nargs=2,
    default=list(C.band),
    metavar=("LOW", "HIGH"),
    help="target per-task pass@1 of the reference policy (inclusive)",
  )
  a("--rounds", type=int, default=C.max_rounds, help="knob moves per task before it is dropped")
  a("--harness", default=C.harness, help="the calibration episodes' harness")
  a(
    "--family",
    default=C.family,
    help="chat template / tool-call syntax the episodes are rendered with (qwen3, qwen3_5)",
  )
  a("--max_tool_calls", type=int, default=C.max_tool_calls, help="per calibration episode")
  a("--calibrate_seed", type=int, default=C.seed, help="seed of the episodes' sampling seeds")
  a(
    "--target_pass_at_1",
    type=float,
    default=C.target_pass_at_1,
    help="the published set's target mean pass@1 of the reference policy (recipe: 0.42)",
  )
  a(
    "--target_pass_at_8",
    type=float,
    default=C.target_pass_at_8,
    help="its target mean pass@8 (recipe: 0.53; estimated and targeted when --k >= 8)",
  )
  a(
    "--set_max_drop",
    type=float,
    default=C.set_max_drop,
    help="fraction of the set the selection may drop toward the target (0 = report only)",
  )
  a(
    "--calibrate_price_in",
    type=float,
    default=C.price_per_mtok_in,
    help="USD per million prompt tokens of the reference policy (0 = cost not priced)",
  )
  a(
    "--calibrate_price_out",
    type=float,
    default=C.price_per_mtok_out,
    help="USD per million completion tokens of the reference policy (0 = cost not priced)",
  )


def _key(env: str) -> str | None:
  return os.environ.get(env) if env else None


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
  writer = ChatConfig(
    base_url=args.endpoint,
    model=args.model,
    api_key=_key(args.api_key_env),
    temperature=args.temperature,
    max_tokens=args.max_tokens,
    timeout_s=args.timeout_s,
    max_retries=args.max_retries,
  )
  calibration = CalibrationConfig(
    enabled=not args.no_calibrate,
    base_url=args.calibrate_endpoint,
    model=args.calibrate_model,
    api_key=_key(args.calibrate_api_key_env),
    k=args.k,
    band=tuple(args.band),
    max_rounds=args.rounds,
    harness=args.harness,
    family=args.family,
    max_tool_calls=args.max_tool_calls,
    seed=args.calibrate_seed,
    target_pass_at_1=args.target_pass_at_1,
    target_pass_at_8=args.target_pass_at_8,
    set_max_drop=args.set_max_drop,
    price_per_mtok_in=args.calibrate_price_in,
    price_per_mtok_out=args.calibrate_price_out,
  )
  generation = GenerationConfig(
    max_attempts=args.max_attempts,
    runner=RunnerConfig(backend=args.backend, memory_mb=args.memory_mb),
  )
  return PipelineConfig(
    out=args.out,
    writer=writer,
    n=args.n,
    seed=args.seed,
    start=args.start,
    workers=args.workers,
    sandbox_workers=args.sandbox_workers,
    until=args.until,
    noop_check=not args.no_noop_check,
    generation=generation,
    calibration=calibration,
    benchmarks=tuple(args.benchmark),
    max_endpoint_failures=args.max_endpoint_failures,
    taxonomy=args.taxonomy,
    resume=args.resume,
    progress=not args.no_progress,
  )


def main(argv: list[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  parser = _parser()
  args = parser.parse_args(argv)
  try:
    cfg = config_from_args(args)
  except ValueError as err:
    parser.error(str(err))
  try:
    return run(cfg, argv)
  except StateError as err:  # the output directory cannot be used
    print(f"error: {err}", file=sys.stderr)
    return EXIT_UNUSABLE


if __name__ == "__main__":
  cli.run(main)
