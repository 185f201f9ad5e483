"""The OpenAI-compatible HTTP API, driven by the official `openai` package against a live server.

The server is the real one (JetStream driver, engine, gRPC + HTTP on loopback) serving a tiny Qwen3
with the real Qwen3 tokenizer and chat template; scripted_model.py sets its weights so that greedy
decoding writes a chosen reply (a tool call, reasoning, a stop string), and a weight push switches
replies between tests.
"""

import asyncio
import json
import time
import urllib.error
import urllib.request

import jax
import numpy as np
import openai
import pytest
import scripted_model

from tmax_jax import tokenizers
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import openai_api, sampling
from tmax_jax.inference import server as server_lib
from tmax_jax.models import registry
from tmax_jax.tasks.generator import llm, pipeline
from tmax_jax.tasks.generator.axes import sample_axes

MODEL = "tiny-qwen3"
CALL = '<tool_call>{"name":"get_weather","arguments":{"days":3}}</tool_call>'
WEATHER = {
  "type": "function",
  "function": {
    "name": "get_weather",
    "description": "Forecast for the next days.",
    "parameters": {
      "type": "object",
      "properties": {"days": {"type": "integer"}},
      "required": ["days"],
    },
  },
}
USER = [{"role": "user", "content": "Weather for the next 3 days?"}]


@pytest.fixture(scope="module")
def live():
  cfg = scripted_model.model_config()
  tok = tokenizers.load_tokenizer(scripted_model.FAMILY)
  spec = registry.tokenizer_spec(scripted_model.FAMILY)
  params = jax.tree.map(np.asarray, registry.init_params(cfg, jax.random.key(0)))
  engine = engine_lib.TmaxEngine(
    cfg,
    engine_lib.EngineConfig(
      max_concurrent_decodes=4,
      max_len=1024,
      max_prefill_length=1024,
      stop_token_ids=spec.stop_token_ids(),
    ),
    lambda: params,
  )
  server = server_lib.start_server(
    engine,
    server_lib.ServerConfig(port=0, openai=openai_api.OpenAIConfig(port=0, model_name=MODEL)),
  )
  client = openai.OpenAI(
    base_url=server.openai.base_url, api_key="unused", max_retries=0, timeout=120
  )

  def script(reply: str | None):
    """Serve weights that answer with `reply` (None: random weights)."""
    new = params if reply is None else scripted_model.scripted_params(params, tok, reply)
    server.push_weights(new, server.driver.version + 1)

  yield dict(server=server, client=client, tok=tok, script=script)
  server.stop()


def _post(url: str, body, method: str = "POST") -> tuple[int, dict]:
  data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
  req = urllib.request.Request(
    url, data=data, method=method, headers={"Content-Type": "application/json"}
  )
  try:
    with urllib.request.urlopen(req, timeout=60) as resp:
      return resp.status, json.loads(resp.read())
  except urllib.error.HTTPError as err:
    return err.code, json.loads(err.read())


def test_models_and_errors_in_openai_shape(live):
  c, base = live["client"], live["server"].openai.base_url
  assert [m.id for m in c.models.list().data] == [MODEL]
  assert c.models.retrieve(MODEL).id == MODEL
  with pytest.raises(openai.NotFoundError) as err:
    c.chat.completions.create(model="gpt-4o", messages=USER)
  assert err.value.body["code"] == "model_not_found"
  with pytest.raises(openai.BadRequestError, match=r"temperature: must be in \[0, 2\]") as err:
    c.chat.completions.create(model=MODEL, messages=USER, temperature=3)
  assert err.value.body["param"] == "temperature"
  with pytest.raises(openai.BadRequestError, match="maximum context length is 1024 tokens") as err:
    c.chat.completions.create(model=MODEL, messages=USER, max_tokens=2000)
  assert err.value.body["code"] == "context_length_exceeded"  # OpenAI's code; clients map it
  assert err.value.body["param"] == "messages"
  with pytest.raises(openai.BadRequestError, match="presence_penalty: not supported"):
    c.chat.completions.create(model=MODEL, messages=USER, presence_penalty=0.5)
  with pytest.raises(openai.BadRequestError, match=r"messages\[0\].role"):
    c.chat.completions.create(model=MODEL, messages=[{"role": "robot", "content": "x"}])
  with pytest.raises(openai.BadRequestError, match="top_logprobs: must be in"):
    c.chat.completions.create(model=MODEL, messages=USER, logprobs=True, top_logprobs=2)
  for url, body, method, status in (
    (f"{base}/nope", {}, "POST", 404),
    (f"{base}/chat/completions", None, "GET", 405),
    (f"{base}/chat/completions", b"{not json", "POST", 400),
  ):
    code, payload = _post(url, body, method)
    assert code == status and set(payload["error"]) == {"message", "type", "param", "code"}


def test_chat_tool_call_with_logprobs_matches_the_rollout_path(live):
  live["script"]("Sure." + CALL)
  c, tok, server = live["client"], live["tok"], live["server"]
  out = c.chat.completions.create(
    model=MODEL, messages=USER, tools=[WEATHER], temperature=0, max_tokens=40, logprobs=True
  )
  choice = out.choices[0]
  assert choice.finish_reason == "tool_calls"
  assert choice.message.content == "Sure."
  (call,) = choice.message.tool_calls
  assert call.type == "function" and call.function.name == "get_weather"
  assert json.loads(call.function.arguments) == {"days": 3}
  # the prompt is the family's chat template with the tool rendered into it
  prompt = tok.encode(
    tok.apply_chat_template(USER, tools=[WEATHER], tokenize=False, add_generation_prompt=True),
    add_special_tokens=False,
  )
  assert out.usage.prompt_tokens == len(prompt)
  reply = tok.encode("Sure." + CALL, add_special_tokens=False)
  assert out.usage.completion_tokens == len(reply) + 1  # + the stop token

  async def rollout():
    async with client_lib.RolloutClient(server.address) as rc:
      return await rc.generate(prompt, 40, sampling.SamplingParams(temperature=0.0))

  ref = asyncio.run(rollout())
  assert ref.token_ids[:-1] == reply
  got = [e.logprob for e in choice.logprobs.content]
  assert got == pytest.approx(ref.logprobs[:-1], abs=1e-6)
  assert "".join(e.token for e in choice.logprobs.content) == "Sure." + CALL


def test_streamed_tool_call_and_usage(live):
  live["script"]("Sure." + CALL)
  stream = live["client"].chat.completions.create(
    model=MODEL,
    messages=USER,
    tools=[WEATHER],
    temperature=0,
    max_tokens=40,
    stream=True,
    stream_options={"include_usage": True},
  )
  chunks = list(stream)
  deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
  assert deltas[0].role == "assistant"
  assert "".join(d.content or "" for d in deltas) == "Sure."
  calls = [tc for d in deltas for tc in (d.tool_calls or [])]
  assert [(tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
    ("get_weather", {"days": 3})
  ]
  assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
  assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 10


def test_stop_strings_reasoning_and_tool_choice_none(live):
  live["script"]("<think>Let me think</think>\n\nHello world STOP here")
  c = live["client"]
  out = c.chat.completions.create(
    model=MODEL, messages=USER, temperature=0, max_tokens=40, stop=[" STOP"]
  )
  msg = out.choices[0]
  assert (msg.message.content, msg.finish_reason) == ("Hello world", "stop")
  assert msg.message.model_extra["reasoning_content"] == "Let me think"
  stream = c.chat.completions.create(
    model=MODEL, messages=USER, temperature=0, max_tokens=40, stop=[" STOP"], stream=True
  )
  deltas = [ch.choices[0].delta for ch in stream]
  assert "".join(d.content or "" for d in deltas) == "Hello world"
  assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == (
    "Let me think"
  )
  live["script"]("Sure." + CALL)
  out = c.chat.completions.create(
    model=MODEL, messages=USER, tools=[WEATHER], temperature=0, tool_choice="none", max_tokens=40
  )
  assert out.choices[0].message.tool_calls is None
  assert out.choices[0].message.content == "Sure." + CALL


def test_sampling_seed_n_and_completions(live):
  live["script"](None)  # random weights: sampling matters
  c = live["client"]
  a, b = (
    c.chat.completions.create(
      model=MODEL, messages=USER, temperature=1.0, seed=7, max_tokens=12, n=2
    )
    for _ in range(2)
  )
  assert [x.message.content for x in a.choices] == [x.message.content for x in b.choices]
  assert a.choices[0].message.content != a.choices[1].message.content  # seed + index
  assert a.usage.completion_tokens == 24
  greedy = c.completions.create(
    model=MODEL, prompt="The weather", max_tokens=6, temperature=0, logprobs=0
  )
  text = greedy.choices[0].text
  assert greedy.choices[0].finish_reason == "length" and len(greedy.choices[0].logprobs.tokens) == 6
  assert "".join(greedy.choices[0].logprobs.tokens) == text
  streamed = c.completions.create(
    model=MODEL, prompt="The weather", max_tokens=6, temperature=0, stream=True, echo=True
  )
  assert "".join(ch.choices[0].text for ch in streamed) == "The weather" + text


def test_llm_task_writer_talks_to_the_server(live):
  """tasks/generator/llm.py's ChatClient against the live API (wiring: the reply is '{}')."""
  live["script"]("{}")
  client = llm.ChatClient(
    llm.ChatConfig(
      base_url=live["server"].openai.base_url, model=MODEL, temperature=0.0, max_tokens=16
    )
  )
  sample = sample_axes(seed=0, index=0)
  with pytest.raises(llm.ReplyError, match="after 2 attempts: keys: missing"):
    pipeline.ask_for_task(client, sample, max_attempts=2)  # the second one is multi-turn
  assert client.complete(llm.render_prompt(sample)) == "{}"


def test_client_that_goes_away_frees_its_slot(live):
  live["script"](None)
  server = live["server"]

  async def active() -> int:
    async with client_lib.RolloutClient(server.address) as rc:
      return (await rc.status()).active_requests

  stream = live["client"].chat.completions.create(
    model=MODEL, messages=USER, max_tokens=900, stream=True, temperature=1.0
  )
  for i, _ in enumerate(stream):
    if i == 3:
      break
  assert asyncio.run(active()) == 1  # still decoding for us
  stream.close()  # the HTTP connection goes away mid-stream
  deadline = time.monotonic() + 30
  while asyncio.run(active()) and time.monotonic() < deadline:
    time.sleep(0.05)
  assert asyncio.run(active()) == 0
