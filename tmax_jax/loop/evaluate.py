"""Evaluation runner: a policy x a harness x a directory of tasks, k runs per task.

Policies: `oracle` (the task's solution/solve.sh scripted through the harness), `noop` (submits
without acting), `server` (a model served by tmax_jax.inference at `address`, or `model` (an HF
checkpoint or a preset) served here on 127.0.0.1 for the run). Harnesses: `bash_tool`, `mini_swe` (agents/episode.py) and `terminus`
(agents/terminus.py). Task directories are detected one by one: `task.toml` = TB2/Harbor (loaded
as is), `task.yaml` = Terminal-Bench 1 (converted with tasks/tb1.py into <output_dir>/converted/).
Every trial runs in a fresh sandbox through tasks/runner.run_trial and is scored by the task's
verifier; a trial passes when its reward >= pass_threshold (1.0: the recipe's binary reward).

Outputs in `output_dir`:
  trials.jsonl        one trial record per line, appended as trials finish
  results.json        the full results (schema below), written atomically at the end
  categories.txt      the per-category table (also printed)
  pass_at_1.png       bar chart of pass@1 per category (and overall) with stderr error bars

results.json schema (schema_version 1):
  schema_version: 1
  config:         the EvalConfig as a dict
  started_at, finished_at: ISO-8601 UTC; wall_time_s: float
  aggregate:
    num_tasks, num_trials, runs_per_task (k), pass_threshold
    pass@1: {mean, stderr}   mean over tasks of the per-task pass rate; stderr = sample std of the
                             per-task rates / sqrt(num_tasks) (0 for one task)
    pass@k: {"<k>": mean unbiased pass@k over tasks} for each k in pass_ks up to runs_per_task
    mean_reward, num_errors (trials that raised instead of being scored; they count as reward 0)
    status_counts: {episode status: count}
    mean_turns, mean_tool_calls, mean_response_tokens, mean_duration_s
  categories: {category: {num_tasks, num_trials, pass@1, stderr, mean_reward}}
              (category = task.toml [metadata].category, "uncategorized" when absent)
  tasks:      {task: {category, num_trials, num_passed, mean_reward, pass@1, "pass@<k>"...}}
  trials:     [trial record] with
              task, category, run (0-based index), reward (float in [0, 1]), passed (bool),
              reward_reason (the runner's reason: "ok", verifier_timeout, build_failed: ...,
              or the episode status that zeroed it), status (episode status: submitted |
              max_tool_calls | max_turns | max_response_tokens | wall_time | oom | sandbox_crash |
              no_episode | error), turns, tool_calls, format_errors, response_tokens,
              duration_s, error (null, or the exception text for status "error")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import json
import math
import os
import pathlib
import threading
import time
from collections import Counter, defaultdict
from typing import Any, Callable, Sequence

from tmax_jax.agents import scripted, terminus
from tmax_jax.agents.episode import EpisodeConfig, EpisodeResult, run_episode
from tmax_jax.agents.worker import ZERO_REWARD_STATUSES, episode_seed
from tmax_jax.loop.config import ModelSpec, ServingConfig
from tmax_jax.tasks import runner as runner_lib
from tmax_jax.tasks import tb1
from tmax_jax.tasks.difficulty import pass_at_k
from tmax_jax.tasks.format import Task, load_task, write_task

POLICIES = ("oracle", "noop", "server")
HARNESSES = ("bash_tool", "mini_swe", "terminus")
SCHEMA_VERSION = 1
UNCATEGORIZED = "uncategorized"


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """What to evaluate and how. `episode` holds the limits shared by every harness and the model
  family (tokenizer, tool-call syntax); its `harness` field is ignored: `harness` here picks the
  loop, terminus included."""

  tasks_dir: str = ""
  output_dir: str = ""
  policy: str = "oracle"
  address: str = ""  # policy=server: host:port of a running server ("" = serve `model` here)
  harness: str = "bash_tool"
  runs_per_task: int = 1  # k
  parallelism: int = 2
  pass_ks: tuple[int, ...] = (1, 2, 4, 8, 16)
  pass_threshold: float = 1.0
  max_tasks: int = 0  # 0 = every task found
  episode: EpisodeConfig = EpisodeConfig()
  runner: runner_lib.RunnerConfig = runner_lib.RunnerConfig()
  terminus_wait_s: float = 0.5  # scripted Terminus policies: seconds per wait
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  seed: int = 0
  request_timeout_s: float = 600.0
  model: ModelSpec = ModelSpec(checkpoint="", preset="")
  serving: ServingConfig = ServingConfig()
  plot: bool = True

  def __post_init__(self):
    if self.policy not in POLICIES:
      raise ValueError(f"EvalConfig.policy={self.policy!r}; expected one of {POLICIES}")
    if self.harness not in HARNESSES:
      raise ValueError(f"EvalConfig.harness={self.harness!r}; expected one of {HARNESSES}")
    if self.runs_per_task < 1 or self.parallelism < 1:
      raise ValueError(f"EvalConfig.runs_per_task={self.runs_per_task} and parallelism="
                       f"{self.parallelism} must both be >= 1")
    if self.policy == "server" and not self.address and not (self.model.checkpoint or
                                                             self.model.preset):
      raise ValueError("EvalConfig: policy=server needs `address` (a running server) or "
                       "`model.checkpoint` / `model.preset` to serve")


# ----------------------------------------------------------------------------------------------
# tasks

def task_format(directory: pathlib.Path) -> str | None:
  """'tb2' (task.toml), 'tb1' (task.yaml) or None."""
  if (directory / "task.toml").is_file():
    return "tb2"
  if (directory / "task.yaml").is_file():
    return "tb1"
  return None


def find_task_dirs(root: str | os.PathLike) -> list[pathlib.Path]:
  """`root` itself when it is a task, else its task subdirectories (searched recursively, not
  below a task), sorted."""
  root = pathlib.Path(root)
  if not root.is_dir():
    raise FileNotFoundError(f"tasks_dir {root}: not a directory")
  if task_format(root):
    return [root]
  found, stack = [], [root]
  while stack:
    for d in sorted(p for p in stack.pop().iterdir() if p.is_dir()):
      (found.append(d) if task_format(d) else stack.append(d))
  if not found:
    raise FileNotFoundError(f"tasks_dir {root}: no task directories (with task.toml for TB2 or "
                            "task.yaml for Terminal-Bench 1) found")
  return sorted(found)


def load_tasks(root: str | os.PathLike, converted_dir: pathlib.Path, max_tasks: int = 0) -> list[Task]:
  """Loads every task; TB1 tasks are converted and written under `converted_dir`."""
  tasks = []
  for d in find_task_dirs(root)[:max_tasks or None]:
    if task_format(d) == "tb2":
      tasks.append(load_task(d))
    else:
      tasks.append(write_task(tb1.convert_tb1(d), converted_dir / d.name, overwrite=True))
  names = Counter(t.name for t in tasks)
  dup = sorted(n for n, c in names.items() if c > 1)
  if dup:
    raise ValueError(f"tasks_dir {root}: duplicate task names {dup}")
  return tasks


def category(task: Task) -> str:
  value = task.config.metadata.get("category")
  return str(value) if value else UNCATEGORIZED


# ----------------------------------------------------------------------------------------------
# policies

class ServerPolicy:
  """`make(task, run)` -> a blocking generate fn backed by one RolloutClient on a private loop."""

  def __init__(self, address: str, tokenizer, cfg: EvalConfig):
    from tmax_jax.inference.client import RolloutClient  # pylint: disable=import-outside-toplevel
    self.cfg = cfg
    self._loop = asyncio.new_event_loop()
    self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                    name="eval-client")
    self._thread.start()
    self.client = self._call(self._make_client(RolloutClient, address))
    self._stop = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]

  @staticmethod
  async def _make_client(cls, address):
    return cls(address)

  def _call(self, coro):
    return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

  def make(self, task: Task, run: int):
    from tmax_jax.inference.sampling import SamplingParams  # pylint: disable=import-outside-toplevel
    c = self.cfg
    params = SamplingParams(temperature=c.temperature, top_p=c.top_p, top_k=c.top_k,
                            seed=episode_seed(c.seed, task.name, 0, run))

    def generate(ids, max_tokens):
      return self._call(self.client.generate(ids, max_tokens, params, stop_token_ids=self._stop,
                                             timeout_s=c.request_timeout_s))
    return generate

  def close(self) -> None:
    self._call(self.client.close())
    self._loop.call_soon_threadsafe(self._loop.stop)
    self._thread.join(timeout=10)


def scripted_policy(kind: str, tokenizer, cfg: EvalConfig) -> Callable:
  """`make(task, run)` for the oracle / do-nothing reference policies in the chosen harness."""
  ep = dataclasses.replace(cfg.episode, harness="mini_swe" if cfg.harness == "mini_swe"
                           else "bash_tool")

  def make(task: Task, run: int):
    del run
    if cfg.harness == "terminus":
      return (terminus.terminus_oracle_policy(tokenizer, task, cfg.terminus_wait_s)
              if kind == "oracle" else terminus.terminus_noop_policy(tokenizer))
    return (scripted.oracle_policy(tokenizer, task, ep) if kind == "oracle"
            else scripted.noop_policy(tokenizer, ep))
  return make


# ----------------------------------------------------------------------------------------------
# trials

def _episode_fn(tokenizer, cfg: EvalConfig):
  if cfg.harness == "terminus":
    tcfg = terminus.from_episode_config(cfg.episode)
    return lambda sb, task, gen: terminus.run_terminus_episode(sb, task.instruction, gen,
                                                               tokenizer, tcfg)
  ep = dataclasses.replace(cfg.episode, harness=cfg.harness)
  return lambda sb, task, gen: run_episode(sb, task.instruction, gen, tokenizer, ep)


def _record(task: Task, run: int) -> dict:
  return {"task": task.name, "category": category(task), "run": run, "reward": 0.0,
          "passed": False, "reward_reason": "", "status": "no_episode", "turns": 0,
          "tool_calls": 0, "format_errors": 0, "response_tokens": 0, "duration_s": 0.0,
          "error": None}


def run_trial(task: Task, run: int, make_policy, episode_fn, cfg: EvalConfig) -> dict:
  """One scored trial -> its record. Exceptions become status "error" with the message."""
  rec, start, box = _record(task, run), time.monotonic(), {}

  def agent(sandbox):
    box["episode"] = episode_fn(sandbox, task, make_policy(task, run))

  try:
    result = runner_lib.run_trial(task, agent, cfg.runner)
    rec["reward"], rec["reward_reason"] = float(result.reward), result.reason
  except Exception as err:  # pylint: disable=broad-except
    rec["status"], rec["error"] = "error", f"{type(err).__name__}: {err}"
    rec["reward_reason"] = "error"
  ep: EpisodeResult | None = box.get("episode")
  if ep is not None:
    rec["status"] = rec["status"] if rec["error"] else ep.status
    rec.update(turns=ep.num_turns, tool_calls=ep.num_tool_calls,
               format_errors=ep.num_format_errors,
               response_tokens=ep.trajectory.num_generated)
    if ep.status in ZERO_REWARD_STATUSES:
      rec["reward"], rec["reward_reason"] = 0.0, ep.status
  rec["passed"] = rec["reward"] >= cfg.pass_threshold
  rec["duration_s"] = round(time.monotonic() - start, 3)
  return rec


def run_trials(tasks: Sequence[Task], make_policy, episode_fn, cfg: EvalConfig,
               jsonl_path: pathlib.Path) -> list[dict]:
  """Every (task, run) in a thread pool; records are appended to `jsonl_path` as they finish."""
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  jobs = [(t, r) for t in tasks for r in range(cfg.runs_per_task)]
  records = []
  with open(jsonl_path, "w", encoding="utf-8") as log, \
      concurrent.futures.ThreadPoolExecutor(cfg.parallelism, thread_name_prefix="trial") as pool, \
      tqdm(total=len(jobs), desc="eval", unit="trial") as bar:
    futures = [pool.submit(run_trial, t, r, make_policy, episode_fn, cfg) for t, r in jobs]
    for fut in concurrent.futures.as_completed(futures):
      rec = fut.result()
      records.append(rec)
      log.write(json.dumps(rec) + "\n")
      log.flush()
      passed = sum(r["passed"] for r in records)
      bar.set_postfix(pass_rate=f"{passed / len(records):.3f}", errors=sum(
          r["status"] == "error" for r in records))
      bar.update(1)
  records.sort(key=lambda r: (r["task"], r["run"]))
  return records


# ----------------------------------------------------------------------------------------------
# aggregation and outputs

def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
  """Mean and standard error (sample std / sqrt(n); 0 for n < 2)."""
  n = len(values)
  if n == 0:
    return 0.0, 0.0
  mean = sum(values) / n
  if n < 2:
    return mean, 0.0
  var = sum((v - mean) ** 2 for v in values) / (n - 1)
  return mean, math.sqrt(var / n)


def _mean(records, key) -> float:
  return sum(r[key] for r in records) / len(records) if records else 0.0


def aggregate(records: Sequence[dict], cfg: EvalConfig) -> dict:
  """The aggregate, per-category and per-task blocks of results.json."""
  by_task = defaultdict(list)
  for r in records:
    by_task[r["task"]].append(r)
  tasks, ks = {}, sorted({k for k in cfg.pass_ks if 1 <= k})
  for name, recs in sorted(by_task.items()):
    n, c = len(recs), sum(r["passed"] for r in recs)
    row = {"category": recs[0]["category"], "num_trials": n, "num_passed": c,
           "mean_reward": _mean(recs, "reward"), "pass@1": c / n}
    row.update({f"pass@{k}": pass_at_k(n, c, k) for k in ks if 1 < k <= n})
    tasks[name] = row
  mean, err = mean_stderr([t["pass@1"] for t in tasks.values()])
  n_min = min((t["num_trials"] for t in tasks.values()), default=0)
  pass_k = {str(k): sum(t[f"pass@{k}"] for t in tasks.values()) / len(tasks)
            for k in ks if 1 < k <= n_min}
  categories = {}
  for cat in sorted({t["category"] for t in tasks.values()}):
    rows = [t for t in tasks.values() if t["category"] == cat]
    cm, ce = mean_stderr([t["pass@1"] for t in rows])
    categories[cat] = {"num_tasks": len(rows), "num_trials": sum(t["num_trials"] for t in rows),
                       "pass@1": cm, "stderr": ce,
                       "mean_reward": sum(t["mean_reward"] for t in rows) / len(rows)}
  agg = {"num_tasks": len(tasks), "num_trials": len(records), "runs_per_task": cfg.runs_per_task,
         "pass_threshold": cfg.pass_threshold, "pass@1": {"mean": mean, "stderr": err},
         "pass@k": pass_k, "mean_reward": _mean(records, "reward"),
         "num_errors": sum(r["status"] == "error" for r in records),
         "status_counts": dict(Counter(r["status"] for r in records)),
         "mean_turns": _mean(records, "turns"), "mean_tool_calls": _mean(records, "tool_calls"),
         "mean_response_tokens": _mean(records, "response_tokens"),
         "mean_duration_s": _mean(records, "duration_s")}
  return {"aggregate": agg, "categories": categories, "tasks": tasks}


def category_table(summary: dict) -> str:
  """A fixed-width text table: one row per category and an `all` row."""
  head = f"{'category':<28} {'tasks':>5} {'trials':>6} {'pass@1':>7} {'stderr':>7} {'reward':>7}"
  lines = [head, "-" * len(head)]
  for cat, row in summary["categories"].items():
    lines.append(f"{cat[:28]:<28} {row['num_tasks']:>5} {row['num_trials']:>6} "
                 f"{row['pass@1']:>7.3f} {row['stderr']:>7.3f} {row['mean_reward']:>7.3f}")
  agg = summary["aggregate"]
  lines += ["-" * len(head),
            f"{'all':<28} {agg['num_tasks']:>5} {agg['num_trials']:>6} "
            f"{agg['pass@1']['mean']:>7.3f} {agg['pass@1']['stderr']:>7.3f} "
            f"{agg['mean_reward']:>7.3f}"]
  return "\n".join(lines) + "\n"


def plot_categories(summary: dict, path: pathlib.Path, title: str) -> None:
  """PNG bar chart: pass@1 per category and overall, stderr error bars."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel
  cats = list(summary["categories"])
  names = cats + ["all"]
  means = [summary["categories"][c]["pass@1"] for c in cats] + [
      summary["aggregate"]["pass@1"]["mean"]]
  errs = [summary["categories"][c]["stderr"] for c in cats] + [
      summary["aggregate"]["pass@1"]["stderr"]]
  fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(names) + 2), 4.0))
  ax.bar(range(len(names)), means, yerr=errs, capsize=4,
         color=["tab:blue"] * len(cats) + ["tab:gray"])
  ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
  ax.set_ylim(0, 1.05)
  ax.set_ylabel("pass@1 (mean ± stderr over tasks)")
  ax.set_title(title)
  fig.tight_layout()
  tmp = path.with_name(f".{path.name}.tmp.png")
  fig.savefig(tmp, format="png", dpi=100)
  plt.close(fig)
  os.replace(tmp, path)


def write_json_atomic(path: pathlib.Path, data: Any) -> None:
  tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
  tmp.write_text(json.dumps(data, indent=2, sort_keys=False))
  os.replace(tmp, path)


def config_dict(cfg: EvalConfig) -> dict:
  return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


# ----------------------------------------------------------------------------------------------
# entry point

def _start_server(cfg: EvalConfig, tokenizer):
  """Serves cfg.model (a checkpoint, or a preset at random init) in process on 127.0.0.1."""
  from tmax_jax.loop import common  # pylint: disable=import-outside-toplevel
  model_cfg, params = common.load_policy(cfg.model)
  stop = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
  return common.start_serving(model_cfg, params, cfg.serving, stop_token_ids=stop)


def evaluate(cfg: EvalConfig, tokenizer=None) -> dict:
  """Runs the evaluation; returns the results dict (also written to cfg.output_dir).

  policy=server with no address serves cfg.model here for the duration of the run.
  tokenizer: defaults to load_tokenizer(cfg.episode.family).
  """
  if not cfg.tasks_dir or not cfg.output_dir:
    raise ValueError(f"EvalConfig.tasks_dir={cfg.tasks_dir!r} and output_dir={cfg.output_dir!r}: "
                     "both must be set")
  out = pathlib.Path(cfg.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  started, t0 = datetime.datetime.now(datetime.timezone.utc), time.monotonic()
  tasks = load_tasks(cfg.tasks_dir, out / "converted", cfg.max_tasks)
  if tokenizer is None:
    from tmax_jax.tokenizers import load_tokenizer  # pylint: disable=import-outside-toplevel
    tokenizer = load_tokenizer(cfg.episode.family)
  server = policy = None
  try:
    if cfg.policy == "server":
      address = cfg.address
      if not address:
        server = _start_server(cfg, tokenizer)
        address = server.address
      policy = ServerPolicy(address, tokenizer, cfg)
      make = policy.make
    else:
      make = scripted_policy(cfg.policy, tokenizer, cfg)
    records = run_trials(tasks, make, _episode_fn(tokenizer, cfg), cfg, out / "trials.jsonl")
  finally:
    if policy is not None:
      policy.close()
    if server is not None:
      server.stop()
  summary = aggregate(records, cfg)
  results = {"schema_version": SCHEMA_VERSION, "config": config_dict(cfg),
             "started_at": started.isoformat(),
             "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
             "wall_time_s": round(time.monotonic() - t0, 3), **summary, "trials": records}
  table = category_table(summary)
  (out / "categories.txt").write_text(table)
  if cfg.plot:
    plot_categories(summary, out / "pass_at_1.png",
                    f"{cfg.policy} / {cfg.harness}: pass@1 by category (k={cfg.runs_per_task})")
  write_json_atomic(out / "results.json", results)
  return results


def summary_text(results: dict) -> str:
  """What the CLI prints: the table, pass@1 +- stderr, pass@k, errors."""
  agg = results["aggregate"]
  lines = [category_table(results).rstrip("\n"),
           f"pass@1 = {agg['pass@1']['mean']:.4f} +- {agg['pass@1']['stderr']:.4f} "
           f"({agg['num_tasks']} tasks x {agg['runs_per_task']} runs)"]
  lines += [f"pass@{k} = {v:.4f}" for k, v in agg["pass@k"].items()]
  if agg["num_errors"]:
    lines.append(f"WARNING: {agg['num_errors']} trial(s) raised errors (scored 0); see "
                 "trials.jsonl `error`")
  return "\n".join(lines) + "\n"
