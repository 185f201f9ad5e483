"""policy=endpoint: an OpenAI-compatible chat endpoint as the evaluated policy.

The client is the pipeline's (tasks/generator/llm.ChatClient: retries with backoff), the policy
horizon/teacher.EndpointPolicy (ChatTeacher per episode: native tool calls for a harness with
tools). What the user can get wrong fails before the first trial: the API key's environment
variable unset, an endpoint that does not answer, refuses the key (401/403) or does not serve the
model (ChatClient.preflight) are UserErrors naming the field. During the run a request that still
fails after the client's retries (a persistent 5xx, a rate limit that does not lift) errors its
trial, which is reported and never scored (report.ERRORED).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tmax_jax.agents import harnesses, template_kwargs
from tmax_jax.agents.worker import request_timeout_s
from tmax_jax.errors import ConfigError, UserError
from tmax_jax.formats import tool_call_format
from tmax_jax.horizon import EndpointPolicy, ToolSpec, Usage
from tmax_jax.loop.evaluate.config import EndpointConfig, EvalConfig
from tmax_jax.tasks.format import Task
from tmax_jax.tasks.generator.llm import ChatClient, ChatConfig, EndpointError

MTOK = 1_000_000


def api_key(cfg: EndpointConfig) -> str | None:
  """The key in the environment variable `cfg.api_key_env` (None when it names none)."""
  if not cfg.api_key_env:
    return None
  key = os.environ.get(cfg.api_key_env, "")
  if not key:
    raise ConfigError(
      f"config.endpoint.api_key_env={cfg.api_key_env}: the environment variable "
      f"{cfg.api_key_env} is not set (it holds the endpoint's API key; '' sends none)"
    )
  return key


def chat_client(cfg: EvalConfig) -> ChatClient:
  """The endpoint's client, checked: it answers, accepts the key and serves the model."""
  e = cfg.endpoint
  if not (e.base_url and e.model):
    raise ConfigError(
      f"config.endpoint.base_url={e.base_url!r}, config.endpoint.model={e.model!r}: "
      "policy=endpoint needs both (the endpoint's http://HOST/v1 URL and a model it serves)"
    )
  client = ChatClient(
    ChatConfig(
      base_url=e.base_url,
      model=e.model,
      api_key=api_key(e),
      temperature=cfg.worker.temperature,
      max_tokens=cfg.episode.turn_max_tokens,
      timeout_s=request_timeout_s(cfg.worker, cfg.episode),
      max_retries=e.max_retries,
      max_tokens_param=e.max_tokens_param,
    )
  )
  try:
    client.preflight()
  except EndpointError as err:
    raise UserError(f"config.endpoint.base_url={e.base_url}: {err}") from None
  return client


def policy(cfg: EvalConfig, client: ChatClient, tokenizer) -> EndpointPolicy:
  """The harness's policy provider on `client`, keeping each episode's usage."""
  tools = harnesses.get(cfg.episode.harness).tools if cfg.endpoint.native_tools else ()
  spec = None
  if tools:
    kwargs = tuple(template_kwargs(cfg.episode).items())
    spec = ToolSpec(tuple(tools), tool_call_format(cfg.episode.family), kwargs)
  return EndpointPolicy(client, tokenizer, cfg.worker.seed, spec, track_usage=True)


def usage_record(usage: Usage, cfg: EndpointConfig) -> dict:
  """A trial's `usage`: requests, the endpoint's token counts and their cost in USD (None when
  the config sets no price)."""
  priced = cfg.price_per_mtok_in > 0 or cfg.price_per_mtok_out > 0
  cost = (
    usage.prompt_tokens * cfg.price_per_mtok_in + usage.completion_tokens * cfg.price_per_mtok_out
  ) / MTOK
  return {
    "requests": usage.requests,
    "prompt_tokens": usage.prompt_tokens,
    "completion_tokens": usage.completion_tokens,
    "cost_usd": round(cost, 6) if priced else None,
  }


def trial_usage(provider: EndpointPolicy, cfg: EndpointConfig) -> Callable[[Task, int], dict]:
  """run_trials' `usage`: (task, run) -> the usage record of that trial's episode (group 0)."""
  return lambda task, run: usage_record(provider.usage(task.name, 0, run), cfg)
