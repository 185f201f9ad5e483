"""A trial's time limits, one rule per test. Evaluation follows Terminal-Bench 2.0's protocol: the
agent gets each task's [agent] timeout_sec and the tests its [verifier] timeout_sec; RL keeps the
episode's wall time and the recipe's max(task, 600 s) for the tests; timeout_multiplier (Harbor's
--timeout-multiplier) scales both. runner.verify is checked to run the tests under the effective
limit (a recording sandbox, then real sandboxes through the evaluation runner)."""

import dataclasses
import pathlib

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.agents import worker
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.config_dict import from_config_dict, load_config_file
from tmax_jax.loop import evaluate as E
from tmax_jax.loop.config import RLConfig
from tmax_jax.sandbox.api import CommandResult
from tmax_jax.tasks import runner
from tmax_jax.tasks.format import AgentConfig, Task, TaskConfig, VerifierConfig, write_task
from tmax_jax.tokenizers import load_tokenizer

CONFIGS = pathlib.Path(__file__).parents[2] / "configs"
EVAL_CONFIGS = ("eval_server", "eval_oracle")


def _task(agent_s=900.0, verifier_s=240.0, tests=None, solve="true\n") -> Task:
  """A task with the given timeouts (default: the TB2 samples' 900 s agent, 240 s verifier)."""
  config = TaskConfig(
    agent=AgentConfig(timeout_sec=agent_s), verifier=VerifierConfig(timeout_sec=verifier_s)
  )
  tests = tests or {"test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"}
  solution = {"solve.sh": ("#!/bin/bash\n" + solve).encode()}
  return Task("solve it", config, tests=tests, solution=solution)


def _eval(name: str) -> E.EvalConfig:
  return from_config_dict(E.EvalConfig, load_config_file(CONFIGS / f"{name}.py"))


def _rl() -> RLConfig:
  return from_config_dict(RLConfig, load_config_file(CONFIGS / "tmax_qwen3_5_9b.py"))


def _agent_limit(cfg, task: Task) -> float:
  return worker.trial_episode(cfg.episode, cfg.runner, task).wall_time_s


@pytest.mark.parametrize("name", EVAL_CONFIGS)
def test_eval_gives_the_agent_the_tasks_own_timeout(name):
  cfg = _eval(name)
  assert cfg.episode.wall_time_s == 0.0 and _agent_limit(cfg, _task(agent_s=900)) == 900
  assert _agent_limit(cfg, _task(agent_s=12000)) == 12000  # no cap below a long task's own
  default = E.EvalConfig(tasks_dir="/x", output_dir="/y")
  assert _agent_limit(default, _task(agent_s=900)) == 900


def test_a_fixed_budget_replaces_the_tasks_agent_timeout():
  """RL keeps the episode's wall time (3600 s); TerminalHorizon's protocol gives every task 3 h."""
  assert _agent_limit(_rl(), _task(agent_s=900)) == 3600
  assert _agent_limit(_eval("eval_terminal_horizon"), _task(agent_s=900)) == 3 * 3600


@pytest.mark.parametrize("name", EVAL_CONFIGS + ("eval_terminal_horizon",))
def test_eval_runs_the_tests_under_the_tasks_verifier_timeout(name):
  cfg = _eval(name).runner
  assert runner.verifier_timeout_s(_task(verifier_s=240), cfg) == 240
  assert runner.verifier_timeout_s(_task(verifier_s=900), cfg) == 900
  default = E.EvalConfig(tasks_dir="/x", output_dir="/y").runner
  assert runner.verifier_timeout_s(_task(verifier_s=240), default) == 240


def test_rl_runs_the_tests_under_max_of_task_and_600():
  cfg = _rl().runner
  assert runner.verifier_timeout_s(_task(verifier_s=240), cfg) == 600
  assert runner.verifier_timeout_s(_task(verifier_s=900), cfg) == 900


def test_timeout_multiplier_scales_both_limits():
  eval_cfg = runner.RunnerConfig(min_verifier_timeout_s=0.0, timeout_multiplier=2.0)
  task = _task(agent_s=900, verifier_s=240)
  assert runner.agent_timeout_s(task, eval_cfg) == 1800
  assert runner.verifier_timeout_s(task, eval_cfg) == 480
  assert runner.agent_timeout_s(task, eval_cfg, budget_s=3600) == 7200  # as Harbor's override
  ep = worker.trial_episode(EpisodeConfig(wall_time_s=0.0), eval_cfg, task)
  assert ep.wall_time_s == 1800
  rl_cfg = runner.RunnerConfig(min_verifier_timeout_s=600.0, timeout_multiplier=2.0)
  assert runner.verifier_timeout_s(task, rl_cfg) == 600  # 480 scaled, still raised to 600
  assert runner.verifier_timeout_s(_task(verifier_s=400), rl_cfg) == 800


def test_bad_time_limits_are_refused():
  with pytest.raises(ValueError, match="timeout_multiplier=0"):
    runner.RunnerConfig(timeout_multiplier=0)
  with pytest.raises(ValueError, match="min_verifier_timeout_s=-1"):
    runner.RunnerConfig(min_verifier_timeout_s=-1)
  with pytest.raises(ValueError, match="wall_time_s=-1"):
    EpisodeConfig(wall_time_s=-1)


class _Recording:
  """A sandbox that records each command's timeout and whose tests write reward 1."""

  def __init__(self):
    self.timeouts = {}

  def exec(self, argv, timeout_s=None, **kw):
    self.timeouts[argv[-1]] = timeout_s
    return CommandResult("", 0)

  def run(self, command, timeout_s=None, **kw):
    self.timeouts[command] = timeout_s
    return CommandResult("", 0)

  def upload(self, src, dest):
    pass

  def download(self, src, dest):
    pathlib.Path(dest).mkdir(parents=True, exist_ok=True)
    (pathlib.Path(dest) / "reward.txt").write_text("1\n")

  def timeout_of(self, marker: str) -> float:
    (timeout,) = [t for cmd, t in self.timeouts.items() if marker in cmd]
    return timeout


@pytest.mark.parametrize("in_shell", [False, True])
def test_verify_runs_the_tests_under_the_effective_timeout(in_shell, tmp_path):
  task = write_task(_task(verifier_s=240), tmp_path / "t")
  for cfg, want in (
    (_eval("eval_server").runner, 240),
    (_rl().runner, 600),
    (runner.RunnerConfig(min_verifier_timeout_s=0.0, timeout_multiplier=1.5), 360),
  ):
    sb = _Recording()
    cfg = dataclasses.replace(cfg, verifier_in_shell=in_shell)
    assert runner.verify(sb, task, cfg).reward == 1.0
    assert sb.timeout_of(runner.TEST_COMMAND) == want


def test_the_oracle_runs_under_the_agent_timeout(tmp_path):
  sb, task = _Recording(), _task(agent_s=900)
  runner.run_solution(sb, task, tmp_path, runner.RunnerConfig(timeout_multiplier=2.0))
  assert sb.timeout_of(runner.ORACLE_COMMAND) == 1800


@pytest.mark.slow  # 21 s; each rule's own test stays
def test_eval_trials_in_sandboxes_keep_the_tasks_limits(tmp_path):
  """A real evaluation: a 2 s solve in a task that allows the agent 1 s ends on wall_time, and a
  2 s test under a 1 s verifier timeout is verifier_timeout (reward 0) although it would pass;
  timeout_multiplier=5 gives both room, and the recipe's RL rule runs the same tests to a pass."""
  require_base_rootfs()
  test_sh = b"#!/bin/bash\nsleep 2\necho 1 > /logs/verifier/reward.txt\n"
  write_task(_task(1.0, 1.0, {"test.sh": test_sh}, "sleep 2\n"), tmp_path / "tasks" / "slow")

  def trial(name, **runner_kw) -> dict:
    cfg = E.EvalConfig(
      tasks_dir=str(tmp_path / "tasks"),
      output_dir=str(tmp_path / name),
      episode=EpisodeConfig(family="qwen3", wall_time_s=0.0),
      worker=WorkerConfig(max_parallel_episodes=1),
      runner=runner.RunnerConfig(memory_mb=2048, **runner_kw),
      plot=False,
    )
    (record,) = E.evaluate(cfg, load_tokenizer("qwen3"))["trials"]
    return record

  tb2 = trial("tb2", min_verifier_timeout_s=0.0)
  assert (tb2["status"], tb2["reward_reason"], tb2["reward"]) == (
    "wall_time",
    "verifier_timeout",
    0.0,
  ), tb2
  scaled = trial("scaled", min_verifier_timeout_s=0.0, timeout_multiplier=5.0)
  assert (scaled["status"], scaled["reward_reason"], scaled["reward"]) == ("submitted", "ok", 1.0)
  rl_rule = trial("rl", min_verifier_timeout_s=600.0)
  assert (rl_rule["reward_reason"], rl_rule["reward"]) == ("ok", 1.0), rl_rule
