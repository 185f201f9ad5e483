"""The harness registry and the shared episode path: every agents/ module imports on its own (the
package-wide cycle check is tests/test_import_graph.py), one name -> harness lookup, canonical
scripted replies that each harness parses back, the zero-reward rule and the tokenizer/family
check of the episode worker."""

import pathlib
import subprocess
import sys

import pytest

from tmax_jax import formats
from tmax_jax.agents import harnesses, scripted, shell, terminus, worker
from tmax_jax.agents.episode import EpisodeConfig, EpisodeResult, stop_token_ids
from tmax_jax.models import registry
from tmax_jax.tasks.runner import RunnerConfig, RunResult
from tmax_jax.tokenizers import load_tokenizer

AGENTS = pathlib.Path(worker.__file__).parent
REPO = AGENTS.parents[1]


def _modules() -> list[str]:
  out = []
  for p in sorted(AGENTS.rglob("*.py")):
    parts = p.relative_to(REPO).with_suffix("").parts
    out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
  return out


@pytest.fixture(scope="module")
def tok():
  return load_tokenizer("qwen3")


def test_each_agents_module_imports_on_its_own():
  procs = {
    m: subprocess.Popen(
      [sys.executable, "-c", f"import {m}"],
      cwd=REPO,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for m in _modules()
  }
  failed = {}
  for m, p in procs.items():
    out, _ = p.communicate(timeout=300)
    if p.returncode != 0:
      failed[m] = out[-2000:]
  assert len(procs) >= 8 and not failed, failed  # agents/ holds 9 modules


def test_registry_lookup_and_errors():
  assert {"bash_tool", "mini_swe", "terminus"} <= set(harnesses.names())
  assert harnesses.get("bash_tool") is shell.BASH_TOOL
  assert harnesses.get("terminus") is terminus.TERMINUS
  with pytest.raises(ValueError, match=r"EpisodeConfig.harness='swe'; expected one of"):
    harnesses.get("swe")
  with pytest.raises(ValueError, match="already registered"):
    harnesses.register(shell.ShellHarness("mini_swe", native_tool=False))


@pytest.mark.parametrize(
  "name,family", [("bash_tool", "qwen3"), ("bash_tool", "qwen3_5"), ("mini_swe", "qwen3")]
)
def test_scripted_replies_parse_back_in_their_harness(name, family):
  tok = load_tokenizer(family)
  cfg = EpisodeConfig(harness=name, family=family, enable_thinking=False)
  script = "cd /workspace && printf 'a\\tb\\n' > x.txt\ncat <<'EOF' > y\n!$ $HOME\nEOF"
  policy = scripted.ScriptedPolicy(tok, [script], cfg)
  harness = harnesses.get(name)
  replies = [policy([1, 2], 10_000) for _ in range(3)]
  texts = [tok.decode(r.token_ids, skip_special_tokens=False) for r in replies]
  assert all(t.endswith(tok.eos_token) for t in texts)
  commands = [harness.parse_command(t.removesuffix(tok.eos_token), cfg) for t in texts]
  assert commands[0] == script  # the oracle's script arrives verbatim
  assert formats.is_submit_command(commands[1]) and commands[2] == commands[1]  # submit repeats
  first = replies[0]
  assert first.finish_reason == "stop" and len(first.logprobs) == len(first.token_ids)
  cut = scripted.ScriptedPolicy(tok, [script], cfg)([1], 3)
  assert len(cut.token_ids) == 3 and cut.finish_reason == "length"


def test_noop_submits_at_once(tok):
  cfg = EpisodeConfig(harness="mini_swe", family="qwen3")
  text = tok.decode(scripted.noop_policy(tok, cfg)([1], 1000).token_ids)
  assert formats.is_submit_command(
    shell.MINI_SWE.parse_command(text.removesuffix(tok.eos_token), cfg)
  )


def test_zero_reward_statuses_override_the_verifier():
  passed = RunResult(1.0, {"reward": 1.0}, "ok", {})
  traj = formats.TokenTrajectory(eos_id=0)
  for status in worker.ZERO_REWARD_STATUSES:
    trial = worker.score(EpisodeResult(traj, status=status), passed)
    assert (trial.reward, trial.reason, trial.episode.reward) == (0.0, status, 0.0)
  trial = worker.score(EpisodeResult(traj, status="submitted"), passed)
  assert (trial.reward, trial.reason) == (1.0, "ok")
  none = worker.score(None, RunResult(0.0, {"reward": 0.0}, "build_failed: x", {}))
  assert none.episode is None and none.reason == "build_failed: x"
  with pytest.raises(worker.NoEpisodeError, match="no episode ran .build_failed: x."):
    none.result("t")


def test_infrastructure_failures_are_never_scored(tok):
  """A crashed sandbox (the harness saw it) or a failure the runner names: no reward, an
  InfrastructureError of that kind; a trial that never started keeps its kind too."""
  del tok
  traj = formats.TokenTrajectory(eos_id=0)
  passed = RunResult(1.0, {"reward": 1.0}, "ok", {}, sandbox="sb-1")
  crashed = worker.score(EpisodeResult(traj, status="sandbox_crash"), passed)
  lost = RunResult(0.0, {}, "sandbox_lost: killed", {}, failure="sandbox_lost", sandbox="sb-2")
  later = worker.score(EpisodeResult(traj, status="submitted"), lost)
  for trial, sandbox in ((crashed, "sb-1"), (later, "sb-2")):
    assert trial.failure == "sandbox_lost" and trial.episode.reward == 0.0
    assert trial.episode.reward_reason == "" and trial.episode.verified_at == 0.0
    with pytest.raises(worker.InfrastructureError) as err:
      trial.result("t")
    assert (err.value.kind, err.value.sandbox) == ("sandbox_lost", sandbox)
  start = RunResult(0.0, {}, "sandbox_start: podman said no", {}, failure="sandbox_start")
  with pytest.raises(worker.NoEpisodeError) as err:
    worker.score(None, start).result("t")
  assert err.value.kind == "sandbox_start"


def test_stop_ids_are_the_familys_and_the_worker_checks_the_tokenizer(tok):
  assert (
    stop_token_ids(EpisodeConfig(family="qwen3"))
    == registry.tokenizer_spec("qwen3").stop_token_ids()
  )
  assert (
    tok.convert_tokens_to_ids(tok.eos_token) == stop_token_ids(EpisodeConfig(family="qwen3"))[0]
  )
  policy = scripted.ScriptedProvider(tok, EpisodeConfig(family="qwen3"), "noop")
  with pytest.raises(ValueError, match="tokenizer and the episode's model family disagree"):
    worker.EpisodeWorker(policy, tok, EpisodeConfig(family="qwen3_5"), RunnerConfig())
  with pytest.raises(ValueError, match="EpisodeConfig.harness='nope'"):
    worker.EpisodeWorker(policy, tok, EpisodeConfig(harness="nope", family="qwen3"), RunnerConfig())


def test_oracle_records_through_the_shared_worker(tok):
  from tests.conftest import require_base_rootfs

  require_base_rootfs()
  from tmax_jax.agents import oracle_data
  from tmax_jax.tasks.procedural import registry

  tasks = [registry.build_task("write_word", s, 0) for s in (0, 1)]
  cfg = EpisodeConfig(family="qwen3", max_turns=4, enable_thinking=False)
  records = oracle_data.oracle_records(tasks, tok, cfg, RunnerConfig(memory_mb=2048), parallel=2)
  assert [r["task"] for r in records] == [t.name for t in tasks]
  for r in records:
    assert r["reward"] == 1.0 and r["status"] == "submitted", r
    assert len(r["tokens"]) == len(r["loss_mask"]) and 0 < sum(r["loss_mask"]) < len(r["tokens"])
