"""Harbor job results (ATIF trajectories + verifier rewards) as SFT records of ours.

A Harbor job directory holds one directory per trial with result.json (TrialResult: task name,
verifier_result.rewards, exception_info) and the agent's ATIF trajectory (agent/trajectory.json,
schema ATIF-v1.x: steps from "system", "user" and "agent" with message, reasoning_content,
tool_calls and the observation that followed). Each trial becomes one record in the format
agents/oracle_data.read_jsonl reads ({"task", "reward", "status", "tokens", "loss_mask", "trial"}),
tokenised with our tokenizer and chat template the way our harnesses build trajectories
(agents/formats/tokens.py): the prompt up to the first agent step, then per agent step its reply
(loss 1, ending in the end-of-turn token) and the template's continuation for the observation
(loss 0). So any Harbor agent and model can be the teacher of the TerminalHorizon collect step.




become the chat template's tool calls, their results `tool` messages. Steps copied from an earlier
context (is_copied_context) carry no loss. Multimodal content is refused (text-only models).

  python3 -m tmax_jax.harbor.trajectories JOB_DIR --out records.jsonl [--family qwen3]
      [--min-reward 1.0]
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

from tmax_jax import cli, errors, formats, json_io
from tmax_jax.agents import action_text
from tmax_jax.tokenizers import load_tokenizer

TERMINUS_TOOLS = {"bash_command", "mark_task_complete"}


class ATIFError(errors.UserError):
  """A trajectory that cannot become a record; the message names the file and the step."""


def _text(content: Any, where: str) -> str:
  if content is None:
    return ""
  if isinstance(content, str):
    return content
  if isinstance(content, list) and all(isinstance(p, dict) for p in content):
    if any(p.get("type") != "text" for p in content):
      raise ATIFError(f"{where}: only text content parts can be trained on (no images/audio)")
    return "".join(str(p.get("text", "")) for p in content)
  raise ATIFError(f"{where}: expected a string or content parts, got {type(content).__name__}")


def _terminus_reply(step: Mapping, where: str) -> str:
  """Terminus-2's reply as the JSON object it parsed (analysis, plan, commands, task_complete)."""
  text = _text(step.get("message"), where)
  analysis, _, plan = text.partition("\nPlan: ")
  if not plan and text.startswith("Plan: "):
    analysis, plan = "", text.removeprefix("Plan: ")
  commands, complete = [], False
  for call in step.get("tool_calls") or []:
    if call.get("function_name") == "mark_task_complete":
      complete = True
    else:
      args = call.get("arguments") or {}
      commands.append((str(args.get("keystrokes", "")), float(args.get("duration", 1.0))))
  return action_text(commands, complete, analysis.removeprefix("Analysis: "), plan)


def _assistant(step: Mapping, agent: Mapping, where: str) -> tuple[dict, bool]:
  """-> (the chat-template message of an agent step, whether its tool calls are structured)."""
  calls = step.get("tool_calls") or []
  names = {c.get("function_name") for c in calls}
  message: dict[str, Any] = {"role": "assistant"}
  structured = False
  if calls and names <= TERMINUS_TOOLS and str(agent.get("name", "")).startswith("terminus"):
    message["content"] = _terminus_reply(step, where)
  else:
    message["content"] = _text(step.get("message"), where)
    if calls:
      structured = True
      message["tool_calls"] = [
        {
          "type": "function",
          "id": c.get("tool_call_id"),
          "function": {"name": c.get("function_name"), "arguments": c.get("arguments") or {}},
        }
        for c in calls
      ]
  if step.get("reasoning_content"):
    message["reasoning_content"] = step["reasoning_content"]
  return message, structured


def _observations(step: Mapping, structured: bool, where: str) -> list[dict]:
  results = (step.get("observation") or {}).get("results") or []
  texts = [(r.get("source_call_id"), _text(r.get("content"), where)) for r in results]
  if structured:
    return [{"role": "tool", "content": t, "tool_call_id": cid} for cid, t in texts]
  joined = "\n".join(t for _, t in texts)
  return [{"role": "user", "content": joined}] if texts else []


def conversation(traj: Mapping, where: str = "trajectory") -> list[tuple[str, list[dict], bool]]:
  """ATIF -> [(kind, messages, trained)]: kind "context" (messages before the next reply) or
  "reply" (one assistant message); trained False for copied-context replies."""
  if not isinstance(traj, Mapping) or not isinstance(traj.get("steps"), list):
    raise ATIFError(f"{where}: not an ATIF trajectory (no steps list)")
  agent, out, pending = traj.get("agent") or {}, [], []
  for i, step in enumerate(traj["steps"]):
    here, source = f"{where}: steps[{i}]", step.get("source")
    if source in ("system", "user"):
      pending.append({"role": source, "content": _text(step.get("message"), here)})
      continue
    if source != "agent":
      raise ATIFError(f"{here}.source: expected system, user or agent, got {source!r}")
    if pending:
      out.append(("context", pending, False))
    message, structured = _assistant(step, agent, here)
    out.append(("reply", [message], not step.get("is_copied_context")))
    pending = _observations(step, structured, here)
  return out


def reply_ids(tokenizer, message: dict, **template_kwargs) -> list[int]:
  """Token ids of one assistant turn after the generation prompt, through the end-of-turn token:
  cut out of the chat template's own rendering, so reasoning and tool calls look as it writes
  them."""
  base = [{"role": "user", "content": "q"}]
  prompt = tokenizer.apply_chat_template(
    base, tokenize=False, add_generation_prompt=True, **template_kwargs
  )
  full = tokenizer.apply_chat_template(base + [message], tokenize=False, **template_kwargs)
  if not full.startswith(prompt):
    raise ATIFError("the chat template renders this assistant turn after another prompt")
  text = full[len(prompt) :]
  eos = tokenizer.eos_token
  if eos not in text:
    raise ATIFError(f"the chat template did not end the assistant turn with {eos!r}")
  return formats.tokens.encode(tokenizer, text[: text.index(eos) + len(eos)])


def trajectory_tokens(tokenizer, traj: Mapping, where: str = "trajectory", **template_kwargs):
  """ATIF -> (tokens, loss_mask) of one sequence (see the module docstring)."""
  parts = conversation(traj, where)
  if not any(kind == "reply" for kind, _, _ in parts):
    raise ATIFError(f"{where}: no agent step to train on")
  tokens, mask = [], []
  for kind, messages, trained in parts:
    if kind == "context":
      ids = (
        formats.continuation_ids(tokenizer, messages, **template_kwargs)
        if tokens
        else formats.prompt_ids(tokenizer, messages, **template_kwargs)
      )
      tokens += ids
      mask += [0] * len(ids)
    else:
      ids = reply_ids(tokenizer, messages[0], **template_kwargs)
      tokens += ids
      mask += [int(trained)] * len(ids)
  return tokens, mask


def trials(job_dir: pathlib.Path) -> Iterator[pathlib.Path]:
  """The trial directories of a Harbor job (those with a result.json), sorted."""
  for d in sorted(p for p in job_dir.iterdir() if p.is_dir()):
    if (d / "result.json").is_file():
      yield d


def _read_json(path: pathlib.Path) -> dict:
  try:
    doc = json.loads(path.read_text(encoding="utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ATIFError(f"{path}: not JSON ({e})") from None
  if not isinstance(doc, dict):
    raise ATIFError(f"{path}: expected a JSON object")
  return doc


def trial_record(trial_dir: pathlib.Path, tokenizer, **template_kwargs) -> dict | None:
  """One record from a trial dir, or None when it has no trajectory (an agent without ATIF, or a
  trial that failed before the agent ran)."""
  result = _read_json(trial_dir / "result.json")
  path = trial_dir / "agent" / "trajectory.json"
  if not path.is_file():
    return None
  rewards = (result.get("verifier_result") or {}).get("rewards") or {}
  reward = rewards.get("reward", next(iter(rewards.values()), 0.0)) if rewards else 0.0
  exc = result.get("exception_info") or {}
  tokens, mask = trajectory_tokens(tokenizer, _read_json(path), str(path), **template_kwargs)
  return {
    "task": result.get("task_name") or trial_dir.name.rpartition("__")[0],
    "trial": result.get("trial_name") or trial_dir.name,
    "reward": float(reward),
    "status": exc.get("exception_type") or "ok",
    "tokens": tokens,
    "loss_mask": mask,
  }


def job_records(
  job_dir: str | pathlib.Path, tokenizer, min_reward: float | None = None, **template_kwargs
) -> list[dict]:
  """Records of every trial of a Harbor job with a trajectory (and reward >= min_reward)."""
  job_dir = pathlib.Path(job_dir)
  if not (job_dir / "config.json").is_file():
    raise ATIFError(f"{job_dir}: not a Harbor job directory (no config.json)")
  records = [r for d in trials(job_dir) if (r := trial_record(d, tokenizer, **template_kwargs))]
  return [r for r in records if min_reward is None or r["reward"] >= min_reward]


def main(argv: list[str] | None = None) -> int:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("job_dir", type=pathlib.Path, help="a Harbor job directory (ATIF trajectories)")
  p.add_argument("--out", type=pathlib.Path, required=True, help="the SFT records (JSONL)")
  p.add_argument("--family", default="qwen3", help="the tokenizer family (its chat template)")
  p.add_argument("--min_reward", type=float, default=None, help="keep trials scoring at least")
  args = p.parse_args(argv)
  if not (args.job_dir / "config.json").is_file():  # before the tokenizer loads
    raise ATIFError(f"{args.job_dir}: not a Harbor job directory (no config.json)")
  try:
    tokenizer = load_tokenizer(args.family)
  except errors.UserError as e:
    raise errors.UserError(f"--family={args.family}: {e}") from None
  records = job_records(args.job_dir, tokenizer, args.min_reward)
  json_io.write_jsonl_atomic(records, args.out)
  print(f"{len(records)} records -> {args.out}")
  return 0


if __name__ == "__main__":
  cli.run(main)
