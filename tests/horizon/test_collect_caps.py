"""TerminalHorizon collection caps (issue 45 point 6): trajectories run under long-horizon caps
(turns, tool calls, time) and at most the SFT row's tokens; a chain's generations share every
cap, so a chain never grows past the row that trains on it."""

import dataclasses

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax import recipes
from tmax_jax.horizon import collect, offline
from tmax_jax.tasks import format as fmt


def test_the_caps_are_long_horizon_and_fit_the_sft_row():
  cfg = collect.CollectConfig(build_dir="b", out="o.jsonl")
  assert cfg.max_tokens == recipes.sft_terminal_horizon().seq_len == 65536
  ep = cfg.task_episode
  assert ep.max_prompt_tokens + ep.max_response_tokens == cfg.max_tokens
  assert ep.max_turns == ep.max_tool_calls == 512 and ep.turn_max_tokens == 16384
  assert ep.wall_time_s == 3 * 3600.0 < cfg.runner.sandbox_lifetime_s
  with pytest.raises(collect.UserError, match="max_tokens=8192 leaves no room"):
    collect.CollectConfig(build_dir="b", out="o", max_tokens=8192)


def test_a_chains_generations_share_the_caps():
  cfg = collect.CollectConfig(build_dir="b", out="o.jsonl", max_tokens=10000)
  assert collect._chain_caps(cfg, None, {"turns": 0, "tool_calls": 0}, 0.0) == cfg.task_episode
  used = {"turns": 500, "tool_calls": 300}
  left = collect._chain_caps(cfg, [0] * 9000, used, 600.0)
  assert (left.max_response_tokens, left.max_turns, left.max_tool_calls) == (1000, 12, 212)
  assert left.wall_time_s == 3 * 3600.0 - 600.0
  spent = {
    "max_response_tokens": ([0] * 10000, {"turns": 1, "tool_calls": 1}, 0.0),
    "max_turns": ([0] * 10, {"turns": 512, "tool_calls": 1}, 0.0),
    "max_tool_calls": ([0] * 10, {"turns": 1, "tool_calls": 512}, 0.0),
    "wall_time": ([0] * 10, {"turns": 1, "tool_calls": 1}, 3 * 3600.0),
  }
  for status, (prefix, used, elapsed) in spent.items():
    assert collect._chain_caps(cfg, prefix, used, elapsed) == status


def test_cli_cap_mistakes_exit_2_before_the_build_is_read(capsys):
  for argv, says in (
    (["--max_turns", "0"], "--max_turns=0: expected >= 1"),
    (["--max_tokens", "4096"], "--max_tokens=4096 leaves no room"),
  ):
    with pytest.raises(SystemExit) as err:
      collect.main(["--build", "/nonexistent", "--out", "x.jsonl", *argv])
    assert err.value.code == 2 and says in capsys.readouterr().err


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
  """A two-generation photo_sync chain (root + resync) written as task directories."""
  require_base_rootfs()
  out = tmp_path_factory.mktemp("chain")
  nodes = list(offline.chain_tree("photo_sync", 0, 0, max_generations=2))[:2]
  return [fmt.write_task(n.task, out / n.lineage.id) for n in nodes]


def test_a_chain_stops_at_the_row(chain):
  from tmax_jax.tokenizers.builder import load_tokenizer

  tok = load_tokenizer("qwen3")
  cfg = collect.CollectConfig(build_dir="b", out="o.jsonl")
  full = collect.run_chain(chain, collect.OracleTeacher(tok, cfg.episode), tok, cfg)
  assert full["rewards"] == [1.0, 1.0] and full["status"] == "submitted", full["error"]
  n = len(full["tokens"])
  episode = dataclasses.replace(cfg.episode, max_prompt_tokens=1024)
  tight = dataclasses.replace(cfg, episode=episode, max_tokens=n - 40)  # the last reply is cut
  cut = collect.run_chain(chain, collect.OracleTeacher(tok, episode), tok, tight)
  assert cut["status"] == "max_response_tokens", (cut["status"], len(cut["tokens"]), n)
  assert len(cut["tokens"]) == len(cut["loss_mask"]) <= n - 40
