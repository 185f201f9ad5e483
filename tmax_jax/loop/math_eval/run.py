"""The entry point: load the problems, render the prompts, serve or reach the model, sample every
problem k times, score, write records.jsonl and results.json."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import pathlib
import time
from collections.abc import Callable, Sequence

from tmax_jax import json_io
from tmax_jax.agents.worker import episode_seed
from tmax_jax.errors import ConfigError
from tmax_jax.formats import THINK_OPEN, encode, strip_reasoning
from tmax_jax.inference.client import ClientConfig, RolloutClient, RolloutError
from tmax_jax.loop.evaluate.report import config_dict
from tmax_jax.loop.math_eval import answers, report
from tmax_jax.loop.math_eval.config import MathEvalConfig
from tmax_jax.loop.math_eval.problems import Problem, load_problems
from tmax_jax.loop.policy import serve_policy
from tmax_jax.models import registry
from tmax_jax.tokenizers import load_tokenizer

log = logging.getLogger(__name__)
RESULT_FILES = ("records.jsonl", "results.json")


@dataclasses.dataclass(frozen=True)
class Prompt:
  ids: list[int]  # the chat template's rendering of the user turn, with the generation prompt
  prefix: str  # reasoning the generation prompt opened ("<think>\n" for Qwen3.5 thinking) or ""


def output_dir(cfg) -> pathlib.Path:
  """Where this run writes (json_io.claim_output_dir over its result files: a run never
  replaces another's results unasked; cfg.overwrite removes them first)."""
  return json_io.claim_output_dir(cfg.output_dir, RESULT_FILES, cfg.overwrite)


def render_prompt(tokenizer, problem: Problem, cfg: MathEvalConfig) -> Prompt:
  """The problem in `cfg.prompt_template` as one user turn of the family's chat template."""
  content = cfg.prompt_template.replace("{problem}", problem.problem)
  kwargs = {} if cfg.enable_thinking is None else {"enable_thinking": cfg.enable_thinking}
  text = tokenizer.apply_chat_template(
    [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True, **kwargs
  )
  opened = THINK_OPEN + "\n"
  return Prompt(encode(tokenizer, text), opened if text.endswith(opened) else "")


def score_reply(text: str, gold: str) -> tuple[str | None, bool]:
  """(extracted answer, correct) of a reply (its reasoning prefix included)."""
  extracted = answers.extract_answer(strip_reasoning(text))
  return extracted, extracted is not None and extracted == answers.normalize(gold)


def _sample(i: int, **kw) -> dict:
  record = {
    "sample": i,
    "status": report.SCORED,
    "extracted": None,
    "correct": False,
    "finish_reason": "",
    "response_tokens": 0,
    "response": "",
    "error": None,
  }
  record.update(kw)
  return record


class Sampler:
  """Samples problems through `client` (RolloutClient.generate's signature) on this loop."""

  def __init__(self, client, tokenizer, cfg: MathEvalConfig, stop_ids: Sequence[int]):
    self.client, self.tokenizer, self.cfg = client, tokenizer, cfg
    self.stop_ids = list(stop_ids)
    self._slots = asyncio.Semaphore(cfg.max_parallel_requests)

  async def sample(self, problem: Problem, prompt: Prompt, i: int) -> dict:
    cfg = self.cfg
    if 0 < cfg.max_prompt_tokens < len(prompt.ids):
      return _sample(
        i,
        status=report.ERROR,
        error=f"prompt_too_long: {len(prompt.ids)} tokens > max_prompt_tokens="
        f"{cfg.max_prompt_tokens} (not sent)",
      )
    seed = episode_seed(cfg.sampling.seed, problem.id, 0, i)
    params = dataclasses.replace(cfg.sampling, seed=seed)
    async with self._slots:
      try:
        out = await self.client.generate(
          prompt.ids,
          cfg.max_tokens,
          params,
          stop_token_ids=self.stop_ids,
          request_id=f"math/{problem.id}/{i}",
          timeout_s=cfg.request_timeout_s,
        )
      except RolloutError as err:
        return _sample(i, status=report.ERROR, error=f"{type(err).__name__}: {err}")
    ids = list(out.token_ids)
    body = ids[:-1] if ids and ids[-1] in self.stop_ids else ids
    response = self.tokenizer.decode(body, skip_special_tokens=False)
    extracted, correct = score_reply(prompt.prefix + response, problem.answer)
    return _sample(
      i,
      extracted=extracted,
      correct=correct,
      finish_reason=out.finish_reason,
      response_tokens=len(ids),
      response=response,
    )

  async def problem(self, problem: Problem, prompt: Prompt) -> dict:
    k = self.cfg.samples_per_problem
    samples = await asyncio.gather(*(self.sample(problem, prompt, i) for i in range(k)))
    return problem_record(problem, list(samples), self.cfg.pass_ks)


def problem_record(problem: Problem, samples: list[dict], pass_ks: Sequence[int]) -> dict:
  """One line of records.jsonl: the problem, its gold answer, its samples and their summary."""
  return {
    "id": problem.id,
    "problem": problem.problem,
    "answer": problem.answer,
    **report.problem_summary(samples, pass_ks),
    "samples": samples,
  }


async def sample_problems(
  problems: Sequence[Problem],
  prompts: Sequence[Prompt],
  sampler: Sampler,
  on_record: Callable[[dict], None] = lambda r: None,
) -> list[dict]:
  """The record of every problem, in problem order; `on_record` sees each as it completes."""

  async def one(problem: Problem, prompt: Prompt) -> dict:
    record = await sampler.problem(problem, prompt)
    on_record(record)
    return record

  return list(await asyncio.gather(*(one(p, q) for p, q in zip(problems, prompts, strict=True))))


def _family(cfg: MathEvalConfig) -> str:
  if not cfg.family:  # a checkpoint that was not readable when the config was built
    raise ConfigError(
      f"family: the tokenizer family of model.checkpoint={cfg.model.checkpoint!r} is unknown "
      "(no readable config.json); set family (e.g. qwen3, qwen3_5)"
    )
  return cfg.family


async def _run(cfg, problems, prompts, tokenizer, stop_ids, address, client, records_file):
  done = []

  def on_record(record: dict) -> None:
    done.append(record)
    with open(records_file, "a", encoding="utf-8") as f:
      f.write(json.dumps(record) + "\n")
    rate = report.aggregate(done, cfg.samples_per_problem, ())["pass@1"]["mean"]
    log.info(
      "%d/%d problems sampled (%s: %d/%d correct); pass@1 so far %s",
      len(done),
      len(problems),
      record["id"],
      record["num_correct"],
      record["num_samples"],
      "-" if rate is None else f"{rate:.3f}",
    )

  if client is not None:
    return await sample_problems(
      problems, prompts, Sampler(client, tokenizer, cfg, stop_ids), on_record
    )
  client_cfg = ClientConfig(timeout_s=cfg.request_timeout_s)
  async with RolloutClient(address, client_cfg) as rollout_client:
    sampler = Sampler(rollout_client, tokenizer, cfg, stop_ids)
    return await sample_problems(problems, prompts, sampler, on_record)


def evaluate_math(cfg: MathEvalConfig, tokenizer=None, client=None) -> dict:
  """Runs the evaluation; returns the results dict (also written to `output_dir(cfg)`, which its
  config.output_dir names). Whether it measured anything is report.check_measured's verdict.

  address "" serves cfg.model here for the run. tokenizer: default load_tokenizer(cfg.family).
  client: anything with RolloutClient.generate's signature, used instead of a server (tests: a
  scripted policy).
  """
  if not cfg.problems or not cfg.output_dir:
    raise ConfigError(
      f"problems={cfg.problems!r} and output_dir={cfg.output_dir!r}: both must be set"
    )
  problems = load_problems(
    cfg.problems,
    cfg.fields,
    integer_answers=cfg.integer_answers,
    max_problems=cfg.max_problems,
    what="config.problems",
  )
  family = _family(cfg)
  tokenizer = load_tokenizer(family) if tokenizer is None else tokenizer
  stop_ids = registry.tokenizer_spec(family).stop_token_ids()
  prompts = [render_prompt(tokenizer, p, cfg) for p in problems]
  out = output_dir(cfg)
  started, t0 = datetime.datetime.now(datetime.UTC), time.monotonic()
  server = None
  if client is None and not cfg.address:
    server = serve_policy(cfg.model, cfg.serving, stop_ids)
  try:
    address = cfg.address or (server.address if server else "")
    records = asyncio.run(
      _run(cfg, problems, prompts, tokenizer, stop_ids, address, client, out / "records.jsonl")
    )
  finally:
    if server is not None:
      server.stop()
  json_io.write_jsonl_atomic(records, out / "records.jsonl")  # in problem order
  results = {
    "schema_version": report.SCHEMA_VERSION,
    "config": {**config_dict(cfg), "output_dir": str(out)},
    "started_at": started.isoformat(),
    "finished_at": datetime.datetime.now(datetime.UTC).isoformat(),
    "wall_time_s": round(time.monotonic() - t0, 3),
    "aggregate": report.aggregate(records, cfg.samples_per_problem, cfg.pass_ks),
    "problems": {
      r["id"]: {k: v for k, v in r.items() if k not in ("id", "problem", "samples")}
      for r in records
    },
  }
  json_io.write_json_atomic(out / "results.json", results)
  return results
