"""Our own server evaluated two ways must score the same (BENCHMARKS "External-endpoint eval"):
policy=server (the episode worker's gRPC client, token ids in and out) and policy=endpoint (the
same server's OpenAI-compatible chat API, messages and native tool calls), same tasks, harness
(bash_tool), seed and k.

  python3 bench/endpoint_parity.py [--runs 4] [--seed 0] [--parallel 2] [--out runs/endpoint_parity]

The model: a tiny Qwen3 (tests/inference/scripted_model.py) whose weights write one of three bash
tool calls with equal probability at the recipe's temperature 1: `tail -n1 in*>answer.txt` (solves
the procedural line_tool tasks asking for the last line), `cp input.* answer.txt` (solves the
copy tasks) or the submit command (solves nothing). The draw is the sampler's, seeded per episode
(agents/worker.episode_seed) and made at the same decode step of every turn, so an episode repeats
its first call until it submits or reaches max_tool_calls: each trial passes or fails by its seed
alone. A random model would never write a tool call that solves anything (pass@1 0 on both paths
proves little) and a greedy scripted one would pass or fail per task whatever the seed; this one
has per-trial outcomes that both paths must reproduce trial by trial through the sampling seed,
the prompts, the tool-call parsing and rendering, the sandbox and the verifier.

Prints a table (per path: pass@1 +- stderr, trials, errors, mean turns, mean response tokens, s
per trial; per task: each path's rewards and whether they agree) and writes it, with every trial's
comparison, to <out>/endpoint_parity.json; each path's eval outputs go to <out>/server and
<out>/endpoint (a one-task endpoint run to <out>/warmup first compiles the engine, untimed). Exit 1
when the paths disagree on any trial (TRIAL_FIELDS and the tokens generated).

Response tokens are each trial's trajectory, which on the endpoint path holds the chat template's
re-rendering of each reply (`<tool_call>\n{"name": "bash", "arguments": {...}}\n</tool_call>`
after an empty think block), not the model's own compact tokens; the tokens actually generated
(in brackets; the endpoint's usage.completion_tokens) are what the two paths must share. The same
re-rendering is what the endpoint's later turns are prompted with (any OpenAI client of a Qwen
server sends parsed tool calls back): the scripted model ignores its context, a real one would not.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from tests.inference import scripted_model  # noqa: E402
from tmax_jax import cli, json_io, tokenizers  # noqa: E402
from tmax_jax.agents import EpisodeConfig  # noqa: E402
from tmax_jax.agents.worker import WorkerConfig  # noqa: E402
from tmax_jax.formats import SUBMIT_COMMAND  # noqa: E402
from tmax_jax.inference import engine as engine_lib  # noqa: E402
from tmax_jax.inference import openai_api  # noqa: E402
from tmax_jax.inference import server as server_lib  # noqa: E402
from tmax_jax.loop import evaluate as E  # noqa: E402
from tmax_jax.models import registry as model_registry  # noqa: E402
from tmax_jax.tasks.procedural import registry  # noqa: E402
from tmax_jax.tasks.runner import RunnerConfig  # noqa: E402

MODEL = "tiny-qwen3-scripted"
# The scripted model's commands (compact JSON: the scripted model needs distinct reply tokens).
COMMANDS = ("tail -n1 in*>answer.txt", "cp input.* answer.txt", SUBMIT_COMMAND)
# (family, seed) at difficulty 0: line_tool's operation per seed: s0, s10 last; s2, s11 copy;
# s1 count, s3 sort, s4 first (never solved).
TASKS = (
  ("line_tool", 0),
  ("line_tool", 10),
  ("line_tool", 2),
  ("line_tool", 11),
  ("line_tool", 1),
  ("line_tool", 3),
  ("line_tool", 4),
)
PATHS = ("server", "endpoint")
# What two trials of the same (task, run) must share for the paths to agree on it, with
# `generated`: the tokens the model generated (the trajectory's on the server path, the
# endpoint's usage.completion_tokens on the other: its trajectory holds the chat template's
# re-rendering of each reply, whose count is `response_tokens`).
TRIAL_FIELDS = ("reward", "passed", "status", "turns", "tool_calls", "format_errors")


def tool_call(command: str) -> str:
  call = '{"name": "bash","arguments":{"command":"' + command + '"}}'
  return f"<tool_call>{call}</tool_call>"


def start_server(slots: int = 2) -> server_lib.RolloutServer:
  """The real engine, gRPC server and OpenAI API (one process, one engine) serving the scripted
  model on loopback; `.address` is the gRPC address, `.openai.base_url` the API's."""
  cfg = scripted_model.model_config()
  tok = tokenizers.load_tokenizer(scripted_model.FAMILY)
  stops = model_registry.tokenizer_spec(scripted_model.FAMILY).stop_token_ids()
  base = jax.tree.map(np.asarray, model_registry.init_params(cfg, jax.random.key(0)))
  params = scripted_model.scripted_params(base, tok, [tool_call(c) for c in COMMANDS])
  engine = engine_lib.TmaxEngine(
    cfg,
    engine_lib.EngineConfig(
      max_concurrent_decodes=slots, max_len=1024, max_prefill_length=1024, stop_token_ids=stops
    ),
    lambda: params,
  )
  return server_lib.start_server(
    engine,
    server_lib.ServerConfig(port=0, openai=openai_api.OpenAIConfig(port=0, model_name=MODEL)),
  )


def write_tasks(root: pathlib.Path, tasks=TASKS) -> pathlib.Path:
  for family, seed in tasks:
    registry.write(family, seed, 0, root / f"{family}-s{seed}", overwrite=True)
  return root


def eval_config(path: str, server, tasks_dir, out, runs: int, seed: int, parallel: int):
  """One path's EvalConfig: everything but the policy is the same for both."""
  return E.EvalConfig(
    tasks_dir=str(tasks_dir),
    output_dir=str(out),
    overwrite=True,
    policy=path,
    address=server.address if path == "server" else "",
    endpoint=E.EndpointConfig(base_url=server.openai.base_url, model=MODEL, max_retries=0)
    if path == "endpoint"
    else E.EndpointConfig(),
    runs_per_task=runs,
    episode=EpisodeConfig(
      harness="bash_tool", family=scripted_model.FAMILY, max_tool_calls=3, turn_max_tokens=64
    ),
    worker=WorkerConfig(max_parallel_episodes=parallel, seed=seed, request_timeout_s=120.0),
    runner=RunnerConfig(memory_mb=2048),
    plot=False,
  )


def generated(rec: dict) -> int:
  """The tokens the model generated in a trial (see TRIAL_FIELDS)."""
  return rec["usage"]["completion_tokens"] if rec["usage"] else rec["response_tokens"]


def path_row(results: dict) -> dict:
  agg = results["aggregate"]
  trials = results["trials"]
  return {
    "pass@1": agg["pass@1"]["mean"],
    "stderr": agg["pass@1"]["stderr"],
    "trials": len(trials),
    "errors": agg["num_errors"],
    "mean_turns": agg["mean_turns"],
    "mean_response_tokens": agg["mean_response_tokens"],
    "mean_generated_tokens": sum(map(generated, trials)) / len(trials) if trials else None,
    "s_per_trial": agg["mean_duration_s"],
    "wall_s": results["wall_time_s"],
  }


def compare(by_path: dict[str, dict]) -> dict:
  """Per path its row, per task each path's rewards and whether every trial agrees (TRIAL_FIELDS
  and the generated tokens), and the trials that differ."""
  trials = {p: {(r["task"], r["run"]): r for r in res["trials"]} for p, res in by_path.items()}
  keys = sorted(set().union(*trials.values()))
  tasks, differing = {}, []
  for task, run in keys:
    recs = {p: trials[p].get((task, run)) for p in PATHS}
    row = tasks.setdefault(task, {**{p: [] for p in PATHS}, "agree": True})
    for p in PATHS:
      row[p].append(None if recs[p] is None else recs[p]["reward"])
    fields = {
      p: None if r is None else {**{f: r[f] for f in TRIAL_FIELDS}, "generated": generated(r)}
      for p, r in recs.items()
    }
    if fields["server"] != fields["endpoint"] or None in fields.values():
      row["agree"] = False
      differing.append({"task": task, "run": run, **fields})
  return {
    "paths": {p: path_row(res) for p, res in by_path.items()},
    "tasks": tasks,
    "agree": not differing,
    "differing_trials": differing,
  }


def run(
  tasks_dir, out: pathlib.Path, runs: int = 2, seed: int = 0, parallel: int = 2, warmup=True
) -> dict:
  """Serves the scripted model, evaluates it on both paths, returns compare()'s report."""
  tok = tokenizers.load_tokenizer(scripted_model.FAMILY)
  server = start_server(slots=parallel)
  try:
    # compiles the engine's programs before either path is timed (not reported)
    if warmup:
      cfg = eval_config("endpoint", server, tasks_dir, out / "warmup", parallel, seed, parallel)
      E.evaluate(dataclasses.replace(cfg, max_tasks=1), tok)
    by_path = {
      p: E.evaluate(eval_config(p, server, tasks_dir, out / p, runs, seed, parallel), tok)
      for p in PATHS
    }
  finally:
    server.stop()
  return compare(by_path)


def _fmt(x, spec: str) -> str:
  return "-" if x is None else format(x, spec)


def table(report: dict) -> str:
  lines = [
    "| path | pass@1 | trials | errors | mean turns | mean response tokens (generated) | s/trial "
    "| wall s |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for p, r in report["paths"].items():
    cells = [
      f"{_fmt(r['pass@1'], '.3f')} +- {_fmt(r['stderr'], '.3f')}",
      str(r["trials"]),
      str(r["errors"]),
      _fmt(r["mean_turns"], ".2f"),
      f"{_fmt(r['mean_response_tokens'], '.1f')} ({_fmt(r['mean_generated_tokens'], '.1f')})",
      _fmt(r["s_per_trial"], ".1f"),
      _fmt(r["wall_s"], ".0f"),
    ]
    lines.append(f"| {p} | " + " | ".join(cells) + " |")
  lines += ["", "| task | server rewards | endpoint rewards | agree |", "|---|---|---|---|"]
  for task, row in report["tasks"].items():
    cells = [" ".join(_fmt(x, ".0f") for x in row[p]) for p in PATHS]
    lines.append(f"| {task} | {cells[0]} | {cells[1]} | {'yes' if row['agree'] else 'NO'} |")
  total = sum(len(row["server"]) for row in report["tasks"].values())
  agreeing = total - len(report["differing_trials"])
  lines += ["", f"trials agreeing on {', '.join(TRIAL_FIELDS)}, generated: {agreeing}/{total}"]
  return "\n".join(lines)


def main(argv=None) -> int:
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument("--runs", type=int, default=4, help="k: runs per task (>= 2)")
  ap.add_argument("--seed", type=int, default=0, help="base of the per-episode sampling seeds")
  ap.add_argument("--parallel", type=int, default=2, help="episodes at once (and server slots)")
  ap.add_argument("--out", default="runs/endpoint_parity", help="output directory")
  args = ap.parse_args(argv)
  if args.runs < 2:
    ap.error(f"--runs={args.runs}: expected >= 2")
  out = pathlib.Path(args.out)
  started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
  report = run(write_tasks(out / "tasks"), out, args.runs, args.seed, args.parallel)
  report.update(started_at=started, command=" ".join(["python3", *sys.argv]), args=vars(args))
  text = table(report)
  print(text)
  if not report["agree"]:
    print("trials that differ:\n" + json.dumps(report["differing_trials"], indent=1))
  json_io.write_json_atomic(out / "endpoint_parity.json", {**report, "table": text})
  print(f"written: {out / 'endpoint_parity.json'}")
  return 0 if report["agree"] else 1


if __name__ == "__main__":
  cli.run(main)
