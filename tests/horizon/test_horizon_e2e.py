"""End to end on the offline path, in real sandboxes: build (stage 1 + audit) -> extend (stage 2)
-> collect with the scripted oracle as teacher (tasks and whole chains, patterns counted) -> SFT a
tiny model for a few steps on the collected JSONL. Also the chat endpoint as a teacher (a local
HTTP server replaying recorded tool calls) and the pattern rules on their own."""

import json
import math

import pytest

from tests.conftest import require_base_rootfs
from tests.tasks.tasks_helpers import ChatServer
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.oracle_data import read_jsonl
from tmax_jax.horizon import audit, build, collect, patterns, record, teacher
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.generator import llm
from tmax_jax.tasks.procedural import chains


@pytest.fixture(scope="module")
def tokenizer():
  from tmax_jax.tokenizers.builder import load_tokenizer

  return load_tokenizer("qwen3")


@pytest.fixture(scope="module")
def built(tmp_path_factory, tokenizer):
  require_base_rootfs()
  out = tmp_path_factory.mktemp("horizon") / "build"
  cfg = build.BuildConfig(
    out=str(out),
    chains=("photo_sync",),
    seeds=(0,),
    max_generations=3,
    audit=audit.AuditConfig(probe_attempts=1),
  )
  auditor = audit.Auditor(tokenizer, audit.ShortcutProbe(), cfg.audit)
  return out, build.Builder(cfg, auditor).run(), cfg, auditor


def test_build_lineage_and_resume(built):
  out, summary, cfg, auditor = built
  assert summary["counts"] == {"accepted": 4, "rebuilt": 0, "rejected": 0, "skipped": 0}, summary
  assert summary["depth"] == 3 and summary["branching_nodes"] == 1 and summary["chains"] == 2
  tree = json.loads((out / "lineage.json").read_text())
  root = "photo_sync-s0-d0"
  assert sorted(tree["nodes"][root]["children"]) == [f"{root}.albums", f"{root}.resync"]
  assert tree["nodes"][f"{root}.resync.trash_restore"]["parent"] == f"{root}.resync"
  rec = record.load_record(out / "tasks" / f"{root}.resync")
  assert rec["status"] == "accepted" and rec["lineage"]["parent"] == root
  assert [c["name"] for c in rec["rounds"][0]["checks"]] == list(audit.CHECKS)
  # every child keeps and passes its parents' tests after its own oracle and starts from the
  # parent's final state: there the parents' checks pass and its own fail
  for nid, node in tree["nodes"].items():
    checks = {c["name"]: c for c in record.load_record(out / "tasks" / nid)["rounds"][0]["checks"]}
    n = node["generation"]
    assert checks["oracle"]["details"]["rewards"] == {
      "reward": 1.0,
      **{f"g{i}": 1.0 for i in range(n + 1)},
    }, nid
    assert checks["untouched"]["details"]["rewards"] == {
      "reward": 0.0,
      **{f"g{i}": float(i < n) for i in range(n + 1)},
    }, nid
  before = (out / "build.jsonl").read_text()
  assert build.Builder(cfg, auditor).run()["counts"]["accepted"] == 4  # resume: nothing re-run
  assert (out / "build.jsonl").read_text() == before
  table = record.summary_table(summary)
  assert "accepted" in table and "depth 3 generations" in table


@pytest.mark.slow  # 30 s; the build and its resume stay in the default suite
def test_collect_then_sft(built, tokenizer, tmp_path):
  out = built[0]
  cfg = collect.CollectConfig(
    build_dir=str(out), out=str(tmp_path / "sft.jsonl"), episode=EpisodeConfig(family="qwen3")
  )
  summary = collect.collect(cfg, collect.OracleTeacher(tokenizer, cfg.episode), tokenizer)
  assert summary["kept"] == 6 and summary["dropped"] == 0, summary
  records = read_jsonl(cfg.out)
  chain = next(r for r in records if r["kind"] == "chain" and len(r["lineage"]) == 3)
  assert chain["rewards"] == [1.0, 1.0, 1.0] and chain["lineage"][0] == "photo_sync-s0-d0"
  # one sequence over three generations: three instructions as user turns, nine tool calls
  text = tokenizer.decode(chain["tokens"])
  assert text.count("<|im_start|>user\n") - text.count("<tool_response>") == 3
  assert chain["tool_calls"] == 9 and chain["turns"] == 12
  assert chain["labels"] == ["Explore", "Build", "Verify"] * 3
  assert (
    chain["patterns"] == {"Explore": 3, "Diagnose": 0, "Build": 3, "Verify": 3, "Coordinate": 0}
    and chain["pattern_total"] == 9
  )
  per = {(r["kind"], r["task"]): r["pattern_total"] for r in summary["per_trajectory"]}
  assert len(per) == 6 and all(v == 3 for (k, _), v in per.items() if k == "task")
  # the records are what launch/train_sft.py reads: SFT a tiny model for a few steps on them
  from tmax_jax.loop.config import MeshConfig, ModelSpec, SFTConfig
  from tmax_jax.loop.sft import run_sft
  from tmax_jax.train.config import LossConfig, OptimizerConfig, TrainConfig

  tiny = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    tie_word_embeddings=True,
    # the head recomputed per 512-token chunk: with remat "none" the trainer keeps the
    # [2,169 x 151,936] fp32 logits and their softmax (a worker peaked at 11.4 GB on them)
    remat_policy="full",
  )
  seq = max(len(r["tokens"]) for r in records)
  # one trajectory per step, the head only on the loss tokens (train/compact.py): CPU-sized
  loss_tokens = max(sum(r["loss_mask"]) for r in records)
  sft = SFTConfig(
    model=ModelSpec(preset="qwen3-0.6b", overrides=tiny),
    trajectories=cfg.out,
    train=TrainConfig(
      optimizer=OptimizerConfig(learning_rate=1e-3, total_steps=2, warmup_steps=0),
      loss=LossConfig(policy_loss="sft"),
      global_batch=1,
      logprob_chunk_size=512,
      loss_tokens_per_row=loss_tokens,
    ),
    steps=2,
    seq_len=seq,
    mesh=MeshConfig(num_devices=1),  # one row per step: the default mesh spans all 8 fake devices
    output_dir=str(tmp_path / "sft"),
  )
  result = run_sft(sft)
  losses = [m["loss"] for m in result.metrics]
  assert len(losses) == 2 and all(math.isfinite(v) and v > 0 for v in losses), losses
  assert (tmp_path / "sft" / "metrics.jsonl").is_file()


def _call(command):
  return (
    "<tool_call>\n"
    + json.dumps({"name": "bash", "arguments": {"command": command}})
    + "\n</tool_call>"
  )


def test_endpoint_teacher_through_the_harness(built, tokenizer, tmp_path):
  task = fmt.load_task(built[0] / "tasks" / "photo_sync-s0-d0")
  steps = collect.oracle_steps(task)
  replies = [
    "I will look first.\n" + _call(steps[0]),
    _call(steps[1]),
    "not a tool call",
    _call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
  ]
  cfg = collect.CollectConfig(build_dir=str(built[0]), out=str(tmp_path / "x.jsonl"))
  with ChatServer(replies) as srv:
    policy = collect.EndpointTeacher(srv.client(), tokenizer)
    got = collect.run_tasks([(task, 0)], policy, tokenizer, cfg)[0]
  assert got["rewards"] == [1.0] and got["status"] == "submitted", got
  first = srv.requests[0]["body"]["messages"]
  assert [m["role"] for m in first] == ["system", "user"] and "# Tools" in first[0]["content"]
  third = srv.requests[2]["body"]["messages"]
  assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
  assert "<tool_response>" in third[3]["content"] and "(exit_code=0)" in third[3]["content"]
  assert srv.requests[0]["body"]["max_tokens"] <= cfg.episode.turn_max_tokens
  ann = patterns.annotate(got["tokens"], got["loss_mask"], tokenizer)
  assert ann["turns"] == 4 and ann["tool_calls"] == 2 and ann["labels"] == ["Explore", "Build"]


def test_chat_messages_and_think_prefill(tokenizer):
  from tmax_jax.agents import harnesses
  from tmax_jax.tokenizers.builder import load_tokenizer

  tok35 = load_tokenizer("qwen3_5")
  cfg = EpisodeConfig(family="qwen3_5")
  ids = harnesses.get("bash_tool").initial_prompt_ids(tok35, "Do it.", cfg)
  msgs, prefill = teacher.chat_messages(tok35.decode(ids, skip_special_tokens=False))
  assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"] == "Do it."
  assert prefill == "<think>\n"

  class Canned:
    def chat(self, messages, max_tokens=None, seed=None, tools=()):
      return llm.ChatReply(_call("ls"))

  out = teacher.ChatTeacher(Canned(), tok35)(ids, 100)
  text = tok35.decode(out.token_ids, skip_special_tokens=False)
  assert text.startswith("\n</think>\n\n<tool_call>") and text.endswith("<|im_end|>")
  with pytest.raises(ValueError, match="no <\\|im_start\\|>role"):
    teacher.chat_messages("plain text")


def test_pattern_rules():
  S = patterns.Step
  calls = [
    S("ls -la && cat notes.txt", "notes\n(exit_code=0)", 0),
    S("cat > fix.py <<'EOF'\nprint(1)\nEOF", "(exit_code=0)", 0),
    S("python3 fix.py", "Traceback (most recent call last)\n(exit_code=1)", 1),
    S("grep -n print fix.py", "1:print(1)\n(exit_code=0)", 0),
    S("sed -i 's/1/2/' fix.py", "(exit_code=0)", 0),
    S("cat fix.py", "print(2)\n(exit_code=0)", 0),
    S("python3 -m pytest -q tests", "2 passed\n(exit_code=0)", 0),
    S("nohup python3 server.py > log 2>&1 &", "(exit_code=0)", 0),
    S("curl -s localhost:8000/health", "ok\n(exit_code=0)", 0),
    S("cat fix.py", "print(2)\n(exit_code=0)", 0, new_instruction=True),
  ]
  labels = patterns.label(calls)
  assert labels == [
    "Explore",
    "Build",
    "Build",
    "Diagnose",
    "Build",
    "Verify",
    "Verify",
    "Coordinate",
    "Verify",
    "Explore",
  ]
  assert patterns.count(labels) == {
    "Explore": 2,
    "Diagnose": 1,
    "Build": 2,
    "Verify": 2,
    "Coordinate": 1,
  }
  assert chains.STEP_MARK == "# step"


@pytest.mark.slow
def test_collect_cli(built, tmp_path, capsys):
  out = tmp_path / "c.jsonl"
  assert collect.main(["--build", str(built[0]), "--out", str(out), "--no-chains"]) == 0
  printed = capsys.readouterr().out
  assert "task: 4 trajectories" in printed and "kept 4 of 4" in printed
  summary = json.loads(out.with_suffix(".summary.json").read_text())
  assert [t["pattern_total"] for t in summary["per_trajectory"]] == [3, 3, 3, 3]
