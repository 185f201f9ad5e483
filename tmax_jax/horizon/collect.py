"""Long-trajectory collection: a teacher runs the built tasks and whole chains; passing
trajectories are annotated with their behaviour patterns and exported as SFT JSONL.

  python3 -m tmax_jax.horizon.collect --build runs/horizon --out runs/horizon/sft.jsonl \
      [--teacher oracle | --teacher endpoint --base_url URL --model M] [--family qwen3_5]

Two kinds of trajectory (records carry `kind` and `lineage`, the ids root .. task):
- task: one episode on one kept node's environment (which already holds its ancestors' results);
- chain: one episode over a whole root-to-leaf lineage in ONE sandbox: the root's environment,
  the root's instruction; after the agent submits, that generation's tests run; on a pass the
  child's new seeds and setup are applied to the agent's own state and the child's instruction
  arrives as the next user turn of the same token sequence, and so on. Kept only if every
  generation passed.
Records: {"tokens", "loss_mask"} (what launch/train_sft.py reads) plus kind, task, lineage,
rewards, status, turns, tool_calls, patterns, pattern_total, labels.

Caps (HORIZON_EPISODE, CollectConfig.max_tokens; the CLI's --max_* flags): long-horizon
trajectories (the paper's average 52.8 turns) run under caps they should not hit, except the one
that matters downstream: a trajectory is at most `max_tokens` tokens, the SFT row it trains in
(65,536: recipes.sft_terminal_horizon's seq_len), so SFT never meets a longer one. A chain's
generations share every cap (tokens, turns, tool calls, wall time): it is one trajectory.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import time
from collections.abc import Sequence
from typing import Protocol

from tmax_jax import cli, formats
from tmax_jax.agents import EpisodeConfig, GenerateFn, harnesses, scripted, template_kwargs
from tmax_jax.agents.oracle_data import write_jsonl
from tmax_jax.errors import UserError
from tmax_jax.horizon import audit, compose, patterns, record
from tmax_jax.sandbox import Sandbox
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks import runner
from tmax_jax.tasks.procedural.chains import STEP_MARK
from tmax_jax.tokenizers import load_tokenizer


class Teacher(Protocol):
  def generate_fn(self, task: fmt.Task, group: int, sample: int) -> GenerateFn: ...


def oracle_steps(task: fmt.Task) -> list[str]:
  """The oracle's tool calls: solve.sh's body split at `chains.STEP_MARK` lines (one call when
  there are none)."""
  mark = re.compile(rf"^{re.escape(STEP_MARK)}$", re.M)
  return [p.strip() for c in scripted.solution_commands(task) for p in mark.split(c) if p.strip()]


@dataclasses.dataclass(frozen=True)
class OracleTeacher:
  """The task's own solve.sh through the harness (scripted, offline), step by step."""

  tokenizer: object
  cfg: EpisodeConfig

  def generate_fn(self, task, group, sample):
    del group, sample
    return scripted.ScriptedPolicy(self.tokenizer, oracle_steps(task), self.cfg)


@dataclasses.dataclass(frozen=True)
class EndpointTeacher:
  """Any OpenAI-compatible endpoint (teacher.ChatTeacher)."""

  client: object
  tokenizer: object

  def generate_fn(self, task, group, sample):
    del task, group, sample
    from tmax_jax.horizon import teacher  # noqa: PLC0415  (openai: endpoint teacher only)

    return teacher.ChatTeacher(self.client, self.tokenizer)


# The collection's caps per trajectory: 512 turns and tool calls (eval_terminal_horizon's), turns
# of up to 16,384 tokens, first prompts of up to 8,192 tokens (a longer one is skipped:
# prompt_too_long), 3 hours (TerminalHorizon's agent time per task). Tokens: CollectConfig.
HORIZON_EPISODE = EpisodeConfig(
  family="qwen3",  # the student's tokenizer family
  max_prompt_tokens=8192,
  max_tool_calls=512,
  max_turns=512,
  turn_max_tokens=16384,
  wall_time_s=3 * 3600.0,
)
SFT_ROW_TOKENS = 65536  # recipes.sft_terminal_horizon().seq_len (tests/horizon check they agree)


@dataclasses.dataclass(frozen=True)
class CollectConfig:
  build_dir: str
  out: str
  episode: EpisodeConfig = HORIZON_EPISODE  # caps per trajectory; a chain's generations share them
  # A trajectory's tokens (prompt + response; a chain: all its generations): the SFT row. The
  # episodes' response caps are cut to it; a trajectory still longer (no prompt cap) is dropped.
  max_tokens: int = SFT_ROW_TOKENS
  runner: runner.RunnerConfig = runner.RunnerConfig()
  runs_per_task: int = 1
  tasks: bool = True
  chains: bool = True
  keep_failed: bool = False
  setup_timeout_s: float = 600.0
  parallel: int = 2  # task episodes in flight (chains run one at a time)

  def __post_init__(self):
    if self.max_tokens <= self.episode.max_prompt_tokens:
      raise UserError(
        f"max_tokens={self.max_tokens} leaves no room for a response after "
        f"max_prompt_tokens={self.episode.max_prompt_tokens}"
      )
    if self.runner.sandbox_lifetime_s <= self.episode.wall_time_s:
      raise UserError(
        f"runner.sandbox_lifetime_s={self.runner.sandbox_lifetime_s} does not outlast a "
        f"trajectory's wall time ({self.episode.wall_time_s} s)"
      )

  @property
  def task_episode(self) -> EpisodeConfig:
    """A single-task episode's caps: the response cut so that prompt + response fit max_tokens."""
    room = self.max_tokens - self.episode.max_prompt_tokens
    return dataclasses.replace(
      self.episode, max_response_tokens=min(self.episode.max_response_tokens, room)
    )


class _Continuation:
  """Shows the policy the whole chain so far instead of the episode's fresh prompt; remembers
  the fresh prompt's length so the episode can be spliced onto the chain afterwards."""

  def __init__(self, generate: GenerateFn, prefix: list[int] | None):
    self.generate, self.prefix, self.fresh = generate, prefix, None

  def __call__(self, token_ids, max_tokens):
    if self.fresh is None:
      self.fresh = len(token_ids)
    ids = token_ids if self.prefix is None else self.prefix + list(token_ids[self.fresh :])
    return self.generate(ids, max_tokens)


def _apply_stage(sb: Sandbox, task: fmt.Task, k: int, timeout_s: float) -> None:
  """Generation k's own build steps (its seeds, then its setup.sh) on the current state."""
  stage = task.path / "environment" / "stages" / f"g{k}"
  workdir = task.config.environment.workdir or compose.WORKDIR
  if (stage / "seeds").is_dir():
    sb.upload(stage / "seeds", workdir)
  sb.upload(stage / "setup.sh", f"/tmp/.horizon_setup_g{k}.sh")
  res = sb.run(
    f"cd {workdir} && bash /tmp/.horizon_setup_g{k}.sh; "
    f"rc=$?; rm -f /tmp/.horizon_setup_g{k}.sh; exit $rc",
    timeout_s=timeout_s,
  )
  if res.exit_code != 0:
    raise RuntimeError(
      f"{task.name}: generation {k} setup failed on the agent's state "
      f"(exit {res.exit_code}): {res.output[-400:]}"
    )


def run_chain(
  tasks: Sequence[fmt.Task], teacher: Teacher, tokenizer, cfg: CollectConfig, sample: int = 0
) -> dict:
  """One trajectory over a whole lineage (root first) in one sandbox -> record fields. Its
  generations share the caps: each runs with what the earlier ones left."""
  out = {"tokens": [], "loss_mask": [], "rewards": [], "status": "", "error": ""}
  kw = template_kwargs(cfg.episode)
  used = {"turns": 0, "tool_calls": 0}

  def agent(sb):
    start = time.monotonic()
    for k, task in enumerate(tasks):
      prefix = None
      if k:
        _apply_stage(sb, task, k, cfg.setup_timeout_s)
        prefix = out["tokens"] + formats.user_observation_ids(tokenizer, task.instruction, **kw)
      ecfg = _chain_caps(cfg, prefix, used, time.monotonic() - start)
      if isinstance(ecfg, str):
        out["status"] = ecfg
        return
      gen = _Continuation(teacher.generate_fn(task, 0, sample), prefix)
      ep = harnesses.run_episode(sb, task.instruction, gen, tokenizer, ecfg)
      used["turns"] += ep.num_turns
      used["tool_calls"] += ep.num_tool_calls
      traj, fresh = ep.trajectory, gen.fresh or len(ep.trajectory.tokens)
      if prefix is None:
        out["tokens"], out["loss_mask"] = list(traj.tokens), list(traj.loss_mask)
      else:
        out["loss_mask"] = (
          out["loss_mask"] + [0] * (len(prefix) - len(out["tokens"])) + list(traj.loss_mask[fresh:])
        )
        out["tokens"] = prefix + list(traj.tokens[fresh:])
      out["status"] = ep.status
      try:
        reward = runner.verify(sb, task, cfg.runner).reward
      except runner.RewardError as err:
        reward, out["error"] = 0.0, str(err)
      out["rewards"].append(reward)
      if reward < 1.0 or ep.status != "submitted":
        return

  try:
    runner.run_trial(tasks[0], agent, cfg.runner)
  except (RuntimeError, runner.RewardError) as err:
    out["error"] = str(err)
  return out


def _chain_caps(
  cfg: CollectConfig, prefix: list[int] | None, used: dict, elapsed_s: float
) -> EpisodeConfig | str:
  """The next generation's caps: what the chain's earlier generations left of every cap (its
  response may grow the chain to max_tokens), or the status of the cap they used up."""
  if prefix is None:
    return cfg.task_episode
  ep = cfg.episode
  left = {
    "max_response_tokens": min(ep.max_response_tokens, cfg.max_tokens - len(prefix)),
    "max_turns": ep.max_turns - used["turns"],
    "max_tool_calls": ep.max_tool_calls - used["tool_calls"],
    "wall_time_s": ep.wall_time_s - elapsed_s,
  }
  spent = [name for name, value in left.items() if value <= 0]
  if spent:
    return spent[0].removesuffix("_s")  # the episode status of that cap
  return dataclasses.replace(ep, **left)


def run_tasks(
  tasks: Sequence[tuple[fmt.Task, int]], teacher: Teacher, tokenizer, cfg: CollectConfig
) -> list[dict]:
  """One scored episode per (task, sample) through agents/worker.EpisodeWorker -> record fields."""
  out = []
  episode = cfg.task_episode
  for trial in audit.run_trials(teacher, tokenizer, episode, cfg.runner, tasks, cfg.parallel):
    ep = trial.episode
    out.append(
      {
        "tokens": list(ep.trajectory.tokens) if ep else [],
        "loss_mask": list(ep.trajectory.loss_mask) if ep else [],
        "rewards": [trial.reward],
        "status": ep.status if ep else "no_episode",
        "error": str(trial.error) if trial.error else "",
      }
    )
  return out


def _load(build: pathlib.Path, nid: str) -> fmt.Task:
  return fmt.load_task(record.task_dir(build, nid))


def kept_tree(build: pathlib.Path) -> dict:
  """The lineage tree of the build's kept tasks; UserError when it has none."""
  if not build.is_dir():
    raise UserError(f"{build}: no such directory (expected tmax_jax.horizon.build's output)")
  tree = record.lineage_tree(record.BuildLog(build).entries)
  if not tree["nodes"]:
    raise UserError(f"{build}: no kept tasks in build.jsonl (run tmax_jax.horizon.build)")
  return tree


def collect(cfg: CollectConfig, teacher: Teacher, tokenizer) -> dict:
  """Runs every kept task and chain of the build; writes the kept trajectories to cfg.out."""
  build = pathlib.Path(cfg.build_dir)
  tree = kept_tree(build)
  work = []
  if cfg.tasks:
    for nid in sorted(tree["nodes"], key=lambda i: (tree["nodes"][i]["generation"], i)):
      path = _ancestry(tree, nid)
      work += [("task", path, s) for s in range(cfg.runs_per_task)]
  if cfg.chains:
    work += [
      ("chain", path, s)
      for path in record.chains(tree)
      if len(path) > 1
      for s in range(cfg.runs_per_task)
    ]
  records, failed, too_long = [], 0, 0
  tasks = [(_load(build, path[-1]), s) for kind, path, s in work if kind == "task"]
  task_results = iter(run_tasks(tasks, teacher, tokenizer, cfg) if tasks else [])
  for kind, path, sample in cli.progress(work, desc="horizon collect", unit="traj"):
    if kind == "task":
      got = next(task_results)
    else:
      got = run_chain([_load(build, n) for n in path], teacher, tokenizer, cfg, sample)
    passed = len(got["rewards"]) == (len(path) if kind == "chain" else 1) and all(
      r >= 1.0 for r in got["rewards"]
    )
    if not got["tokens"] or not (passed or cfg.keep_failed):
      failed += 1
      continue
    if len(got["tokens"]) > cfg.max_tokens:  # only without a prompt cap: never a longer row
      too_long += 1
      continue
    ann = patterns.annotate(
      got["tokens"], got["loss_mask"], tokenizer, cfg.episode.harness, cfg.episode.family
    )
    records.append(
      {
        "kind": kind,
        "task": path[-1],
        "lineage": list(path),
        "sample": sample,
        "passed": passed,
        **got,
        **ann,
      }
    )
  write_jsonl(records, cfg.out)
  return {**summarize(records, len(work), failed + too_long), "too_long": too_long}


def _ancestry(tree, nid: str) -> list[str]:
  path = [nid]
  while tree["nodes"][path[0]]["parent"]:
    path.insert(0, tree["nodes"][path[0]]["parent"])
  return path


def summarize(records: Sequence[dict], attempted: int, dropped: int) -> dict:
  by_kind = {}
  for kind in ("task", "chain"):
    rs = [r for r in records if r["kind"] == kind]
    if rs:
      by_kind[kind] = {
        "trajectories": len(rs),
        "mean_turns": sum(r["turns"] for r in rs) / len(rs),
        "mean_patterns": sum(r["pattern_total"] for r in rs) / len(rs),
        "patterns": {k: sum(r["patterns"][k] for r in rs) for k in patterns.KINDS},
      }
  return {
    "attempted": attempted,
    "kept": len(records),
    "dropped": dropped,
    "by_kind": by_kind,
    "per_trajectory": [
      {
        "task": r["task"],
        "kind": r["kind"],
        "turns": r["turns"],
        "tool_calls": r["tool_calls"],
        "patterns": r["patterns"],
        "pattern_total": r["pattern_total"],
      }
      for r in records
    ],
  }


def main(argv: list[str] | None = None) -> int:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--build", required=True, help="output directory of tmax_jax.horizon.build")
  p.add_argument("--out", required=True, help="SFT JSONL to write")
  p.add_argument(
    "--teacher",
    default="oracle",
    choices=("oracle", "endpoint"),
    help="oracle: the tasks' solutions; endpoint: a model at --base_url",
  )
  p.add_argument("--base_url", default="", help="OpenAI-compatible endpoint (--teacher endpoint)")
  p.add_argument("--model", default="", help="model name the endpoint serves")
  p.add_argument("--api_key_env", default=None, help="environment variable holding the API key")
  p.add_argument("--family", default="qwen3", help="the student's tokenizer / tool-call format")
  p.add_argument("--harness", default="bash_tool", help="harness the episodes run in")
  p.add_argument("--runs_per_task", type=int, default=1, help="teacher episodes per task")
  p.add_argument("--no_chains", action="store_true", help="skip the whole-chain episodes")
  p.add_argument("--no_tasks", action="store_true", help="skip the single-task episodes")
  p.add_argument("--backend", default=None, help="sandbox backend (default: the best available)")
  caps = p.add_argument_group("caps per trajectory (a chain's generations share them)")
  ep = HORIZON_EPISODE
  cap_flags = (
    ("max_tokens", SFT_ROW_TOKENS, "tokens, prompt included: the SFT row (seq_len) it trains in"),
    ("max_prompt_tokens", ep.max_prompt_tokens, "tokens of the first prompt (longer: skipped)"),
    ("turn_max_tokens", ep.turn_max_tokens, "tokens per turn"),
    ("max_turns", ep.max_turns, "turns"),
    ("max_tool_calls", ep.max_tool_calls, "tool calls"),
    ("wall_time_s", int(ep.wall_time_s), "seconds of the agent's time"),
  )
  for flag, default, what in cap_flags:
    caps.add_argument(f"--{flag}", type=int, default=default, help=f"{what} (default {default})")
  args = p.parse_args(argv)
  for flag, _, _ in cap_flags:
    if getattr(args, flag) < 1:
      p.error(f"--{flag}={getattr(args, flag)}: expected >= 1")
  if args.max_tokens <= args.max_prompt_tokens:
    p.error(
      f"--max_tokens={args.max_tokens} leaves no room for a response after "
      f"--max_prompt_tokens={args.max_prompt_tokens}"
    )
  if args.harness not in harnesses.names():  # the checks that need no model or sandbox first
    p.error(f"--harness={args.harness}: no such harness; expected one of {harnesses.names()}")
  kept_tree(pathlib.Path(args.build))
  try:
    tokenizer = load_tokenizer(args.family)
  except UserError as e:
    raise UserError(f"--family={args.family}: {e}") from None
  episode = dataclasses.replace(
    HORIZON_EPISODE,
    harness=args.harness,
    family=args.family,
    max_prompt_tokens=args.max_prompt_tokens,
    turn_max_tokens=args.turn_max_tokens,
    max_turns=args.max_turns,
    max_tool_calls=args.max_tool_calls,
    wall_time_s=float(args.wall_time_s),
  )
  if args.teacher == "endpoint":
    from tmax_jax.tasks.generator import llm  # noqa: PLC0415  (openai: endpoint only)

    if not args.base_url:
      p.error("--teacher endpoint needs --base_url and --model")
    cli.check_reachable("--base_url", args.base_url)
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    teacher = EndpointTeacher(
      llm.ChatClient(llm.ChatConfig(args.base_url, args.model, key)), tokenizer
    )
  else:
    teacher = OracleTeacher(tokenizer, episode)
  cfg = CollectConfig(
    build_dir=args.build,
    out=args.out,
    episode=episode,
    # the agent's time + an hour for the setup and each generation's tests
    runner=runner.RunnerConfig(
      backend=args.backend,
      sandbox_lifetime_s=max(runner.RunnerConfig().sandbox_lifetime_s, args.wall_time_s + 3600),
    ),
    runs_per_task=args.runs_per_task,
    tasks=not args.no_tasks,
    chains=not args.no_chains,
    max_tokens=args.max_tokens,
  )
  summary = collect(cfg, teacher, tokenizer)
  record.write_json(pathlib.Path(args.out).with_suffix(".summary.json"), summary)
  for kind, s in summary["by_kind"].items():
    print(
      f"{kind}: {s['trajectories']} trajectories, {s['mean_turns']:.1f} turns and "
      f"{s['mean_patterns']:.1f} patterns on average; {s['patterns']}"
    )
  print(f"kept {summary['kept']} of {summary['attempted']} -> {args.out}")
  return 0


if __name__ == "__main__":
  cli.run(main)
