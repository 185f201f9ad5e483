"""configs/serve_random.py (issue 47 point 3): a tiny random-weights Qwen3 that serves the OpenAI
API with the real tokenizer's vocabulary, whose caps fit configs/eval_server.py, and whose replies
end. The README's commands are the constants below, run as written (free ports instead of 8000 and
9000, a task dir and an output dir filled in): the server, a chat with tools and a completion by
curl and by the `openai` client (slow), and eval_server against it (slow; Harbor's is in
tests/harbor/test_harbor_random.py). The default suite checks that the configs fit each other and
answers the API in process."""

import dataclasses
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

import openai
import pytest

from tests.conftest import require_base_rootfs
from tmax_jax import tokenizers
from tmax_jax.config_dict import from_config_dict, load_config_file
from tmax_jax.loop.config import ServeConfig
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.loop.policy import model_config
from tmax_jax.loop.serve import start_from_config
from tmax_jax.models import registry
from tmax_jax.tasks.procedural import registry as procedural

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE_URL = "http://127.0.0.1:8000/v1"  # the README's; the tests substitute the served one

# ---------------------------------------------------------------- the README's commands, verbatim
SERVE = "python3 launch/serve.py --config=configs/serve_random.py"
CURL_CHAT = """curl -s http://127.0.0.1:8000/v1/chat/completions \\
  -H 'Content-Type: application/json' -d '{
  "model": "qwen3", "max_tokens": 64,
  "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}'"""
CURL_COMPLETION = """curl -s http://127.0.0.1:8000/v1/completions \\
  -H 'Content-Type: application/json' \\
  -d '{"model": "qwen3", "prompt": "def fib(n):", "max_tokens": 32}'"""
OPENAI_CLIENT = """import openai

client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
  "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
chat = client.chat.completions.create(
  model="qwen3", max_tokens=64, tools=[weather],
  messages=[{"role": "user", "content": "What is the weather in Paris?"}])
print(chat.choices[0].finish_reason, chat.usage)
text = client.completions.create(model="qwen3", prompt="def fib(n):", max_tokens=32)
print(text.choices[0].finish_reason, repr(text.choices[0].text))
"""
EVAL = (
  "python3 launch/eval.py --config=configs/eval_server.py --config.tasks_dir=TASKS "
  "--config.output_dir=runs/eval_random"
)
# ---------------------------------------------------------------------------------------------

WEATHER = json.loads(CURL_CHAT.split("-d '", 1)[1].rstrip("'"))["tools"][0]
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
ENV = dict(os.environ, JAX_PLATFORMS="cpu")


def _configs() -> tuple[ServeConfig, EvalConfig]:
  serve = from_config_dict(ServeConfig, load_config_file(ROOT / "configs/serve_random.py"))
  ev = from_config_dict(EvalConfig, load_config_file(ROOT / "configs/eval_server.py"))
  return serve, ev


def test_serve_random_fits_eval_server_and_the_openai_api():
  serve, ev = _configs()
  engine, episode = serve.serving.engine, ev.episode
  # every id of the tokenizer is in the served vocabulary (the OpenAI API refuses to start else)
  spec = registry.tokenizer_for(model_config(serve.model).model_type)
  assert model_config(serve.model).vocab_size >= spec.vocab_size == 151669
  # eval_server's longest request: each turn carries the whole context (prompt + response so far)
  longest = episode.max_prompt_tokens + episode.max_response_tokens
  assert engine.max_prefill_length >= longest and engine.max_len >= longest
  assert ev.serving.engine.max_len == engine.max_len  # what eval_server serves in process
  assert engine.max_concurrent_decodes >= ev.worker.max_parallel_episodes
  assert ev.address == f"127.0.0.1:{serve.serving.port}" and ev.episode.family == spec.family
  assert serve.openai.port == 8000 and BASE_URL.endswith(f":{serve.openai.port}/v1")
  assert serve.model.random_reply_tokens > 0  # agents get replies that end
  # the README's tools request fits a prefill
  tok = tokenizers.load_tokenizer(spec.family)
  ids = tok.apply_chat_template(USER, tools=[WEATHER], add_generation_prompt=True, tokenize=True)
  assert len(ids) <= engine.max_prefill_length


def _check_answers(client: openai.OpenAI) -> None:
  chat = client.chat.completions.create(
    model="qwen3", max_tokens=64, tools=[WEATHER], messages=USER
  )
  assert chat.usage.prompt_tokens > 100 and chat.usage.completion_tokens >= 1
  assert chat.choices[0].finish_reason in ("stop", "length", "tool_calls")
  ended = 0
  for seed in range(4):
    text = client.completions.create(model="qwen3", prompt="def fib(n):", max_tokens=64, seed=seed)
    assert text.usage.completion_tokens >= 1
    ended += text.choices[0].finish_reason == "stop"
  assert ended >= 2  # replies end (~16 tokens on average), not at max_tokens


@pytest.mark.slow
def test_serve_random_answers_the_openai_api():
  """In process: 50 s on the loaded 2-core machine (the model is built, its programs compiled)."""
  serve, _ = _configs()
  cfg = dataclasses.replace(
    serve,
    serving=dataclasses.replace(serve.serving, port=0),
    openai=dataclasses.replace(serve.openai, port=0),
  )
  server = start_from_config(cfg)
  try:
    client = openai.OpenAI(base_url=server.openai.base_url, api_key="unused", max_retries=0)
    _check_answers(client)
  finally:
    server.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """The README's server command on free ports: -> (gRPC address, base URL)."""
  tmp = tmp_path_factory.mktemp("serve")
  ready, log = tmp / "ready.json", tmp / "serve.log"
  flags = ["--config.serving.port=0", "--config.openai.port=0", f"--config.ready_file={ready}"]
  cmd = [sys.executable, *shlex.split(SERVE)[1:], *flags]
  with log.open("w") as out:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=ENV)
  deadline = time.monotonic() + 300
  while not ready.exists():
    assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
    time.sleep(0.2)
  info = json.loads(ready.read_text())
  yield info["address"], info["openai_base_url"]
  proc.terminate()
  proc.wait(timeout=60)


@pytest.mark.slow
def test_readme_openai_commands(served):
  _, base_url = served
  for command in (CURL_CHAT, CURL_COMPLETION):
    out = subprocess.run(
      ["bash", "-c", command.replace(BASE_URL, base_url)],
      capture_output=True,
      text=True,
      timeout=300,
      check=True,
    )
    body = json.loads(out.stdout)
    assert body["object"] in ("chat.completion", "text_completion"), body
    assert body["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), body
    assert body["usage"]["completion_tokens"] >= 1, body
  out = subprocess.run(
    [sys.executable, "-c", OPENAI_CLIENT.replace(BASE_URL, base_url)],
    capture_output=True,
    text=True,
    timeout=300,
    check=True,
  )
  lines = out.stdout.splitlines()
  assert len(lines) == 2 and "prompt_tokens=" in lines[0], out.stdout
  _check_answers(openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0))


@pytest.mark.slow
def test_readme_eval_server_against_it(served, tmp_path):
  """configs/eval_server.py as shipped against the served model: its requests fit (nothing
  errored), the replies end, so trials take turns until the task's time limit (15 s here)."""
  require_base_rootfs()
  address, _ = served
  tasks = tmp_path / "tasks"
  procedural.write("csv_aggregate", 0, 0, tasks / "csv")
  toml = tasks / "csv" / "task.toml"
  toml.write_text(
    toml.read_text().replace("[agent]\ntimeout_sec = 1800.0", "[agent]\ntimeout_sec = 15.0")
  )
  out = tmp_path / "eval"
  command = EVAL.replace("TASKS", str(tasks)).replace("runs/eval_random", str(out))
  cmd = [sys.executable, *shlex.split(command)[1:], f"--config.address={address}"]
  run = subprocess.run(
    cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=ENV, check=False
  )
  assert run.returncode == 0, run.stderr[-4000:]
  results = json.loads((out / "results.json").read_text())
  assert results["aggregate"]["num_errors"] == 0, results["aggregate"]["error_reasons"]
  assert len(results["trials"]) == 4  # eval_server's runs_per_task
  for trial in results["trials"]:
    assert trial["status"] in ("wall_time", "max_turns"), trial
    assert trial["turns"] >= 2 and trial["response_tokens"] > 0, trial
