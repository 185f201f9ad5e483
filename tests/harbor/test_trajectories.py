"""ATIF trajectories (Harbor job results) -> SFT records: token sequences with loss on the agent's
replies only, through our tokenizer and chat template."""

import json

import pytest

from tmax_jax import formats, tokenizers
from tmax_jax.agents import oracle_data
from tmax_jax.harbor import trajectories as atif

INSTRUCTION = "Print hello into /workspace/out.txt."


@pytest.fixture(scope="module")
def tok():
  return tokenizers.load_tokenizer("qwen3")


def _terminus() -> dict:
  return {
    "schema_version": "ATIF-v1.6",
    "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "openai/m"},
    "steps": [
      {"step_id": 1, "source": "user", "message": INSTRUCTION},
      {
        "step_id": 2,
        "source": "agent",
        "message": "Analysis: Empty dir.\nPlan: Write the file.",
        "tool_calls": [
          {
            "tool_call_id": "call_0_1",
            "function_name": "bash_command",
            "arguments": {"keystrokes": "echo hello > out.txt\n", "duration": 0.1},
          }
        ],
        "observation": {"results": [{"source_call_id": "call_0_1", "content": "$ echo hello"}]},
      },
      {
        "step_id": 3,
        "source": "agent",
        "message": "Analysis: Done.\nPlan: Finish.",
        "tool_calls": [
          {"tool_call_id": "c2", "function_name": "mark_task_complete", "arguments": {}}
        ],
        "observation": {"results": [{"content": "Are you sure?"}]},
      },
    ],
  }


def _replies(tok, tokens, mask) -> list[str]:
  """The decoded runs of loss tokens (one per trained reply)."""
  runs, prev = [], 0
  for t, m in zip(tokens, mask, strict=True):
    if m and not prev:
      runs.append([])
    if m:
      runs[-1].append(t)
    prev = m
  return [tok.decode(ids) for ids in runs]


def test_terminus_steps_become_its_json_replies(tok):
  tokens, mask = atif.trajectory_tokens(tok, _terminus())
  replies = _replies(tok, tokens, mask)
  assert len(replies) == 2 and all(r.endswith("<|im_end|>") for r in replies)
  first = formats.parse_terminus(formats.strip_reasoning(replies[0].removesuffix("<|im_end|>")))
  assert [c.keystrokes for c in first.commands] == ["echo hello > out.txt\n"]
  assert (first.analysis, first.plan, first.task_complete) == (
    "Empty dir.",
    "Write the file.",
    False,
  )
  second = formats.parse_terminus(formats.strip_reasoning(replies[1].removesuffix("<|im_end|>")))
  assert second.task_complete and not second.commands
  context = tok.decode([t for t, m in zip(tokens, mask, strict=True) if not m])
  assert context.startswith("<|im_start|>user\n" + INSTRUCTION)
  assert "<|im_start|>user\n$ echo hello<|im_end|>" in context  # the observation is a user turn
  assert "Are you sure?" not in context  # nothing after the last reply


def test_tool_calls_reasoning_and_copied_context(tok):
  traj = {
    "schema_version": "ATIF-v1.6",
    "agent": {"name": "openhands", "version": "1"},
    "steps": [
      {"step_id": 1, "source": "system", "message": "You are careful."},
      {"step_id": 2, "source": "user", "message": INSTRUCTION},
      {
        "step_id": 3,
        "source": "agent",
        "message": "earlier turn",
        "is_copied_context": True,
        "observation": {"results": [{"content": "ok"}]},
      },
      {
        "step_id": 4,
        "source": "agent",
        "message": "",
        "reasoning_content": "Use echo.",
        "tool_calls": [
          {"tool_call_id": "t1", "function_name": "bash", "arguments": {"command": "echo hi"}}
        ],
        "observation": {"results": [{"source_call_id": "t1", "content": "hi"}]},
      },
      {"step_id": 5, "source": "agent", "message": "Done."},
    ],
  }
  tokens, mask = atif.trajectory_tokens(tok, traj)
  replies = _replies(tok, tokens, mask)
  assert len(replies) == 2  # the copied-context turn is in the sequence without loss
  assert "earlier turn" in tok.decode(tokens) and "earlier turn" not in "".join(replies)
  assert "<think>\nUse echo.\n</think>" in replies[0]
  assert '<tool_call>\n{"name": "bash", "arguments": {"command": "echo hi"}}' in replies[0]
  assert "<|im_start|>user\n<tool_response>\nhi\n</tool_response>" in tok.decode(tokens)
  assert replies[1].endswith("Done.<|im_end|>")
  assert tok.decode(tokens).startswith("<|im_start|>system\nYou are careful.")


def test_bad_trajectories_are_named(tok):
  with pytest.raises(atif.ATIFError, match="no steps list"):
    atif.trajectory_tokens(tok, {"agent": {}})
  image = [{"type": "image", "source": {"media_type": "image/png", "path": "a.png"}}]
  traj = _terminus()
  traj["steps"][0]["message"] = image
  with pytest.raises(atif.ATIFError, match=r"t.json: steps\[0\]: only text content parts"):
    atif.trajectory_tokens(tok, traj, "t.json")
  traj["steps"] = traj["steps"][:1]
  traj["steps"][0]["message"] = "x"
  with pytest.raises(atif.ATIFError, match="no agent step"):
    atif.trajectory_tokens(tok, traj)


def _trial(job, name, reward, with_trajectory=True, exception=None):
  d = job / name
  (d / "agent").mkdir(parents=True)
  result = {
    "task_name": f"org/{name}",
    "trial_name": name,
    "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
    "exception_info": exception,
  }
  (d / "result.json").write_text(json.dumps(result))
  if with_trajectory:
    (d / "agent" / "trajectory.json").write_text(json.dumps(_terminus()))


def test_job_records_are_sft_records(tok, tmp_path):
  job = tmp_path / "job"
  job.mkdir()
  with pytest.raises(atif.ATIFError, match="not a Harbor job directory"):
    atif.job_records(job, tok)
  (job / "config.json").write_text("{}")
  _trial(job, "a__1", 1.0)
  _trial(job, "b__1", 0.0)
  _trial(job, "c__1", 1.0, with_trajectory=False)  # e.g. the oracle agent: no trajectory
  err = {"exception_type": "AgentTimeoutError", "exception_message": "late"}
  _trial(job, "d__1", None, exception=err)
  records = atif.job_records(job, tok)
  assert [(r["task"], r["reward"], r["status"]) for r in records] == [
    ("org/a__1", 1.0, "ok"),
    ("org/b__1", 0.0, "ok"),
    ("org/d__1", 0.0, "AgentTimeoutError"),
  ]
  assert [r["trial"] for r in atif.job_records(job, tok, min_reward=1.0)] == ["a__1"]
  out = tmp_path / "records.jsonl"
  assert atif.main([str(job), "--out", str(out), "--min-reward", "1"]) == 0
  (rec,) = oracle_data.read_jsonl(out)  # what launch/train_sft.py reads
  assert rec["tokens"] == records[0]["tokens"] and sum(rec["loss_mask"]) > 0
