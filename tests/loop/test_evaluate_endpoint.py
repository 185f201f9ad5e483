"""Evaluation with policy=endpoint: any OpenAI-compatible chat endpoint plays the harness (issue 45
point 2). A scripted faulty endpoint (pipeline/scripted.ScriptedEndpoint): a 429 is retried and the
trial scored (the oracle's command sent as a native tool call passes), a persistent 500 errors the
trial (never scored), and a missing key variable, a wrong key, a dead endpoint or an unserved model
fail before any trial. Our own OpenAI API serving a tiny scripted Qwen3: trials scored, its usage
recorded. Sandbox tests skip (with the reason) when no sandbox backend/rootfs is available."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.conftest import require_base_rootfs
from tests.inference import scripted_model
from tmax_jax import tokenizers
from tmax_jax.agents import scripted
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.worker import WorkerConfig
from tmax_jax.errors import ConfigError, UserError
from tmax_jax.formats import SUBMIT_COMMAND
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import openai_api
from tmax_jax.inference import server as server_lib
from tmax_jax.loop import evaluate as E
from tmax_jax.models import registry as model_registry
from tmax_jax.pipeline.scripted import Answer, ScriptedEndpoint
from tmax_jax.tasks.procedural import registry
from tmax_jax.tasks.runner import RunnerConfig

REPO = pathlib.Path(__file__).resolve().parents[2]
KEY_ENV = "TMAX_TEST_ENDPOINT_KEY"
MODEL = "tiny-qwen3"


@pytest.fixture(scope="module")
def tok():
  return tokenizers.load_tokenizer("qwen3")


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("tasks")
  return root, registry.write("csv_aggregate", 0, 0, root / "csv")


def _cfg(tasks, out, base_url, model="scripted", runs=1, turn_tokens=1024, **endpoint):
  return E.EvalConfig(
    tasks_dir=str(tasks),
    output_dir=str(out),
    policy="endpoint",
    endpoint=E.EndpointConfig(base_url=base_url, model=model, **endpoint),
    runs_per_task=runs,
    episode=EpisodeConfig(
      harness="bash_tool", family="qwen3", max_tool_calls=4, turn_max_tokens=turn_tokens
    ),
    worker=WorkerConfig(max_parallel_episodes=2, request_timeout_s=60.0),
    runner=RunnerConfig(memory_mb=2048),
    plot=False,
  )


def _tool_call(command: str, prompt_tokens: int, completion_tokens: int) -> Answer:
  """A chat completion calling the bash tool natively, with its usage."""
  call = {"name": "bash", "arguments": json.dumps({"command": command})}
  body = {
    "id": "scripted",
    "object": "chat.completion",
    "created": 0,
    "model": "scripted",
    "choices": [
      {
        "index": 0,
        "finish_reason": "tool_calls",
        "message": {
          "role": "assistant",
          "content": None,
          "tool_calls": [{"id": "call_x", "type": "function", "function": call}],
        },
      }
    ],
    "usage": {
      "prompt_tokens": prompt_tokens,
      "completion_tokens": completion_tokens,
      "total_tokens": prompt_tokens + completion_tokens,
    },
  }
  return Answer(body=json.dumps(body).encode())


def test_429_is_retried_and_the_trial_scored(task_dir, tmp_path, tok, monkeypatch):
  require_base_rootfs()
  tasks, task = task_dir
  (solution,) = scripted.solution_commands(task)
  seen = []

  def respond(body):
    seen.append(body)
    if len(seen) == 1:
      return Answer(status=429)  # rate limited: the client backs off and asks again
    turns = sum(m["role"] == "assistant" for m in body["messages"])
    return _tool_call(solution if turns == 0 else SUBMIT_COMMAND, 1000 * (turns + 1), 50)

  monkeypatch.setenv(KEY_ENV, "sk-test")
  with ScriptedEndpoint(respond, api_key="sk-test") as ep:
    cfg = _cfg(
      tasks,
      tmp_path / "o",
      ep.base_url,
      api_key_env=KEY_ENV,
      price_per_mtok_in=2.0,
      price_per_mtok_out=10.0,
    )
    res = E.evaluate(cfg, tokenizer=tok)
  (rec,) = res["trials"]
  assert rec["status"] == "submitted" and rec["passed"], rec
  assert rec["reward"] == 1.0 and rec["tool_calls"] == 1 and rec["error"] is None
  assert rec["usage"] == {
    "requests": 2,
    "prompt_tokens": 3000,
    "completion_tokens": 100,
    "cost_usd": (3000 * 2.0 + 100 * 10.0) / 1e6,
  }
  agg = res["aggregate"]
  assert agg["pass@1"] == {"mean": 1.0, "stderr": 0.0} and agg["num_errors"] == 0
  assert agg["usage"] == rec["usage"]
  E.check_measured(res)
  assert "usage: 2 requests, 3000 prompt + 100 completion tokens, $0.0070" in E.summary_text(res)
  assert len(seen) == 3  # the 429'd request, its retry, the submit
  first, second = seen[1], seen[2]
  assert first == seen[0] and first["model"] == "scripted" and isinstance(first["seed"], int)
  assert first["max_tokens"] == 1024 and first["temperature"] == 1.0  # the turn cap, worker's T
  assert [t["function"]["name"] for t in first["tools"]] == ["bash"]
  assert [m["role"] for m in first["messages"]] == ["system", "user"]
  assert "<tools>" not in first["messages"][0]["content"]  # the tool goes as `tools`
  call, result = second["messages"][2], second["messages"][3]
  assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"command": solution}
  assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
  assert "(exit_code=0)" in result["content"]
  on_disk = json.loads((tmp_path / "o" / "trials.jsonl").read_text())
  assert on_disk["usage"] == rec["usage"]


def test_a_persistent_500_errors_the_trial(task_dir, tmp_path, tok):
  require_base_rootfs()
  tasks, _ = task_dir
  with ScriptedEndpoint(lambda body: Answer(status=500)) as ep:
    cfg = _cfg(
      tasks, tmp_path / "o", ep.base_url, max_retries=2, max_tokens_param="max_completion_tokens"
    )
    res = E.evaluate(cfg, tokenizer=tok)
    requests = ep.requests
  (rec,) = res["trials"]
  assert rec["status"] == "error" and not rec["passed"], rec
  assert "EndpointError" in rec["error"] and "HTTP 500" in rec["error"]
  assert rec["usage"] == dict(requests=0, prompt_tokens=0, completion_tokens=0, cost_usd=None)
  assert len(requests) == 3  # the first attempt and max_retries=2 retries
  assert requests[0]["max_completion_tokens"] == 1024 and "max_tokens" not in requests[0]
  agg = res["aggregate"]
  assert agg["pass@1"] == {"mean": None, "stderr": None} and agg["num_errors"] == 1
  with pytest.raises(UserError, match="no trial was scored"):
    E.check_measured(res)


def test_endpoint_mistakes_fail_before_any_trial(task_dir, tmp_path, monkeypatch):
  """The key variable unset, a wrong key (401), nothing listening, a model the endpoint does not
  serve: a UserError naming the field, raised before the output directory is made."""
  tasks, _ = task_dir
  out = tmp_path / "o"
  monkeypatch.delenv(KEY_ENV, raising=False)
  with ScriptedEndpoint(lambda body: "unused", api_key="sk-right") as ep:
    url = ep.base_url
    with pytest.raises(ConfigError, match=f"api_key_env={KEY_ENV}: the environment variable"):
      E.evaluate(_cfg(tasks, out, url, api_key_env=KEY_ENV))
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    with pytest.raises(UserError, match=r"endpoint.base_url=.*HTTP 401"):
      E.evaluate(_cfg(tasks, out, url, api_key_env=KEY_ENV))
    monkeypatch.setenv(KEY_ENV, "sk-right")
    with pytest.raises(UserError, match=r"model 'gpt-x' is not served .*\['scripted'\]"):
      E.evaluate(_cfg(tasks, out, url, model="gpt-x", api_key_env=KEY_ENV))
    assert ep.requests == []  # no chat request was made
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
  with pytest.raises(UserError, match=rf"endpoint.base_url=http://127.0.0.1:{port}/v1: endpoint"):
    E.evaluate(_cfg(tasks, out, f"http://127.0.0.1:{port}/v1", max_retries=0))
  with pytest.raises(ConfigError, match="policy=endpoint needs both"):
    E.evaluate(_cfg(tasks, out, ""))
  assert not out.exists()
  with pytest.raises(ValueError, match="endpoint.max_tokens_param='max_new'"):
    E.EndpointConfig(max_tokens_param="max_new")


def test_cli_names_the_missing_key(task_dir, tmp_path):
  tasks, _ = task_dir
  cmd = [
    sys.executable,
    str(REPO / "launch" / "eval.py"),
    f"--config={REPO}/configs/eval_endpoint.py",
    f"--config.tasks_dir={tasks}",
    f"--config.output_dir={tmp_path / 'o'}",
    "--config.endpoint.model=gpt-x",
    f"--config.endpoint.api_key_env={KEY_ENV}",
  ]
  env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert f"error: config.endpoint.api_key_env={KEY_ENV}: the environment variable" in proc.stderr
  assert "Traceback" not in proc.stderr


# --- our own OpenAI API serving a tiny scripted Qwen3 -----------------------------------------


@pytest.fixture(scope="module")
def our_api():
  """The real server (engine, driver, HTTP API) whose weights answer every prompt with a bash
  call that submits (compact JSON: the scripted model needs distinct reply tokens)."""
  cfg = scripted_model.model_config()
  tok = tokenizers.load_tokenizer(scripted_model.FAMILY)
  stops = model_registry.tokenizer_spec(scripted_model.FAMILY).stop_token_ids()
  base = jax.tree.map(np.asarray, model_registry.init_params(cfg, jax.random.key(0)))
  call = '{"name": "bash","arguments":{"command":"' + SUBMIT_COMMAND + '"}}'
  reply = f"<tool_call>{call}</tool_call>"
  params = scripted_model.scripted_params(base, tok, reply)
  engine = engine_lib.TmaxEngine(
    cfg,
    engine_lib.EngineConfig(
      max_concurrent_decodes=2, max_len=1024, max_prefill_length=1024, stop_token_ids=stops
    ),
    lambda: params,
  )
  server = server_lib.start_server(
    engine,
    server_lib.ServerConfig(port=0, openai=openai_api.OpenAIConfig(port=0, model_name=MODEL)),
  )
  yield server.openai.base_url
  server.stop()


@pytest.mark.slow
def test_our_openai_api_as_the_endpoint(task_dir, tmp_path, tok, our_api):
  require_base_rootfs()
  tasks, _ = task_dir
  cfg = _cfg(tasks, tmp_path / "o", our_api, model=MODEL, runs=2, turn_tokens=64)  # max_len 1024
  res = E.evaluate(cfg, tokenizer=tok)
  agg = res["aggregate"]
  assert agg["num_errors"] == 0, [r["error"] for r in res["trials"]]
  assert agg["num_trials"] == 2 and agg["pass@1"]["mean"] == 0.0  # submitted without solving
  for rec in res["trials"]:
    assert rec["status"] == "submitted" and rec["reward_reason"] == "ok", rec
    assert rec["turns"] == 1 and rec["format_errors"] == 0 and rec["response_tokens"] > 0
    usage = rec["usage"]
    assert usage["requests"] == 1 and usage["cost_usd"] is None
    assert usage["prompt_tokens"] > 200  # the system prompt, the bash tool, the task
    assert usage["completion_tokens"] == 22  # the scripted reply's 21 tokens and the stop token
  assert agg["usage"]["requests"] == 2
