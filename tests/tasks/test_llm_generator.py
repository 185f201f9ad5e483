"""The LLM task-writing path against a real OpenAI-compatible HTTP server on 127.0.0.1 serving
recorded replies: strict parsing, the retry path (the error is fed back), the reject path, and -
with a real sandbox - parse -> build -> smoke test -> keep."""

import dataclasses
import json
import pathlib

import pytest
from tasks_helpers import ChatServer

from tmax_jax.tasks.format import load_task
from tmax_jax.tasks.generator import llm, pipeline
from tmax_jax.tasks.generator.axes import sample_axes

DATA = pathlib.Path(__file__).with_name("data")
GOOD = (DATA / "llm_task_reply.json").read_text()


def _sample():
  return dataclasses.replace(
    sample_axes(0, 0), verifier="exact_text", domain="data_querying", fixture="text_only"
  )


def test_prompt_mentions_every_axis():
  s = _sample()
  msgs = llm.render_prompt(s)
  assert [m["role"] for m in msgs] == ["system", "user"]
  for value in (
    s.domain,
    s.skill_type,
    s.persona,
    s.language,
    s.task_complexity,
    s.command_complexity,
    s.fixture,
    s.verifier,
    *s.primitive_skills,
  ):
    assert value in msgs[1]["content"]
  assert "$" not in msgs[1]["content"] and "exactly one JSON object" in msgs[0]["content"]


def test_parse_recorded_reply_and_fence():
  task, smoke = llm.parse_task_reply("```json\n" + GOOD + "\n```", _sample())
  assert task.config.task.name == "sales-by-region" and smoke.startswith("test -s")
  assert task.environment["seeds/sales.csv"].startswith(b"region,amount")
  assert set(task.tests) == {"test.sh", "checker.py", "spec.json"}
  assert (
    task.config.metadata["domain"] == "data_querying"
    and task.config.metadata["verifier"] == "exact_text"
  )
  assert task.solution["solve.sh"].startswith(b"#!/bin/bash")


def _mutate(**changes):
  obj = json.loads(GOOD)
  for k, v in changes.items():
    if v is None:
      obj.pop(k)
    else:
      obj[k] = v
  return json.dumps(obj)


@pytest.mark.parametrize(
  "reply,match",
  [
    ("Sure! Here is the task: {}", "does not start with"),
    ("```json\n{}\n```\n```json\n{}\n```", "2 fenced blocks"),
    ('{"name": "x",', "invalid JSON"),
    ("[1, 2]", "does not start with"),
    (_mutate(smoke_test=None), r"missing \['smoke_test'\]"),
    (_mutate(extra_key=1), r"unexpected \['extra_key'\]"),
    (_mutate(name="Not A Slug"), "name: expected a kebab-case slug"),
    (_mutate(difficulty="trivial"), "difficulty"),
    (
      _mutate(verifier={"kind": "fuzz_equivalence", "params": {}}),
      "verifier.kind: expected 'exact_text'",
    ),
    (
      _mutate(verifier={"kind": "exact_text", "params": {"targets": [], "strictness": 1}}),
      "verifier.params: targets",
    ),
    (_mutate(verifier={"kind": "exact_text", "params": {"bogus": 1}}), "verifier.params"),
    (_mutate(environment={"seeds": {"../escape": "x"}}), r"environment.seeds.../escape"),
    (_mutate(instruction=""), "instruction: expected a non-empty str"),
  ],
)
def test_strict_parse_errors(reply, match):
  with pytest.raises(llm.ReplyError, match=match):
    llm.parse_task_reply(reply, _sample())


def test_retry_feeds_the_error_back_then_succeeds():
  with ChatServer(["I cannot comply with JSON today.", _mutate(difficulty="trivial"), GOOD]) as srv:
    task, smoke, attempts = pipeline.ask_for_task(srv.client(), _sample(), max_attempts=3)
  assert attempts == 3 and task.config.task.name == "sales-by-region"
  assert [r["path"] for r in srv.requests] == ["/v1/chat/completions"] * 3
  assert srv.requests[0]["auth"] == "Bearer k" and srv.requests[0]["body"]["model"] == "recorded"
  third = srv.requests[2]["body"]["messages"]
  assert len(third) == 6 and third[2]["content"] == "I cannot comply with JSON today."
  assert "does not start with" in third[3]["content"] and "difficulty" in third[5]["content"]


def test_reject_after_max_attempts_writes_nothing(tmp_path):
  with ChatServer(["nope", "[]", '{"name": 1}']) as srv:
    res = pipeline.generate_task(
      _sample(), srv.client(), tmp_path, pipeline.GenerationConfig(max_attempts=3)
    )
  assert (
    res.status == "rejected" and res.attempts == 3 and "ReplyError: after 3 attempts" in res.reason
  )
  assert [p.name for p in tmp_path.iterdir()] == ["generation.jsonl"]
  rec = json.loads((tmp_path / "generation.jsonl").read_text())
  assert rec["status"] == "rejected" and rec["sample_id"] == _sample().id


def test_http_errors_retry_in_the_client_or_count_as_attempts():
  # 5xx / 429: the client retries with backoff (here at once: retry-after-ms 1); one attempt
  with ChatServer([500, 429, GOOD]) as srv:
    _, _, attempts = pipeline.ask_for_task(srv.client(), _sample(), max_attempts=2)
  assert attempts == 1 and len(srv.requests) == 3
  # a 400 is this request's fault: it counts as an attempt and the next one succeeds
  with ChatServer([400, GOOD]) as srv:
    _, _, attempts = pipeline.ask_for_task(srv.client(), _sample(), max_attempts=2)
  assert attempts == 2
  # still failing after the client's retries: the endpoint's fault, raised at once, no attempt
  with ChatServer([503] * 10) as srv, pytest.raises(llm.EndpointError, match="HTTP 503") as err:
    pipeline.ask_for_task(srv.client(), _sample(), max_attempts=3)
  assert not err.value.fatal and len(srv.requests) == 1 + srv.client().config.max_retries
  with ChatServer([401]) as srv, pytest.raises(llm.EndpointError, match="HTTP 401") as err:
    pipeline.ask_for_task(srv.client(), _sample(), max_attempts=3)
  assert err.value.fatal and len(srv.requests) == 1


def _sandbox_or_skip():
  try:
    from tmax_jax.sandbox import open_sandbox  # noqa: F401
    from tmax_jax.sandbox.images.base_rootfs import is_built, rootfs_path
  except ImportError as err:
    pytest.skip(f"sandbox backends not available: {err}")
  if not is_built(rootfs_path()):
    pytest.skip("base rootfs not built (python3 -m tmax_jax.sandbox)")


def test_end_to_end_keep_and_build_reject(tmp_path):
  _sandbox_or_skip()
  broken_build = _mutate(
    name="broken-build", environment={"dockerfile": "FROM debian\nRUN exit 3\n"}
  )
  failing_smoke = _mutate(name="failing-smoke", smoke_test="test -f /workspace/nope.csv")
  wrong_oracle = _mutate(name="wrong-oracle", solution="echo 'east 7' > /workspace/totals.txt\n")
  samples = [dataclasses.replace(_sample(), id=f"s{i}") for i in range(4)]
  with ChatServer([GOOD, broken_build, failing_smoke, wrong_oracle]) as srv:
    summary = pipeline.generate_dataset(samples, srv.client(), tmp_path / "out")
  recs = [json.loads(x) for x in (tmp_path / "out" / "generation.jsonl").read_text().splitlines()]
  assert [r["status"] for r in recs] == ["kept", "rejected", "rejected", "rejected"], recs
  assert recs[0]["oracle_reward"] == 1.0
  assert (
    recs[1]["reason"].startswith("oracle run: build_failed") and "exit 3" in recs[1]["reason"]
  ), recs[1]
  assert "smoke test" in recs[2]["reason"], recs[2]
  assert "oracle scored 0" in recs[3]["reason"], recs[3]
  kept = load_task(recs[0]["task_dir"])
  assert (
    kept.config.task.name == "sales-by-region" and kept.config.metadata["generator"] == "tmax-llm"
  )
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
    "generation.jsonl",
    "s0-sales-by-region",
    "summary.json",
  ]
  assert summary == {
    "requested": 4,
    "kept": 1,
    "rejected": 3,
    "balance_score": pytest.approx(1 / 9),
  }


def test_untranslatable_environment_is_rejected_before_any_sandbox(tmp_path):
  reply = _mutate(environment={"dockerfile": "FROM debian\nADD https://example.com/x.tgz /x\n"})
  config = pipeline.GenerationConfig(
    runner=pipeline.runner.RunnerConfig(image="/nonexistent-rootfs")
  )
  with ChatServer([reply]) as srv:
    res = pipeline.generate_task(_sample(), srv.client(), tmp_path, config)
  assert res.status == "rejected" and res.attempts == 1
  # the runner reports a broken environment as its build_failed reason (no sandbox was started)
  assert (
    res.reason.startswith("oracle run: build_failed: ")
    and "cannot be fetched offline" in res.reason
  )
  assert [p.name for p in tmp_path.iterdir()] == ["generation.jsonl"]


def test_generate_llm_cli(tmp_path, capsys):
  _sandbox_or_skip()
  from tmax_jax.tasks import generate_llm

  start = next(
    i
    for i in range(200)
    if (sample_axes(7, i).verifier, sample_axes(7, i).fixture) == ("exact_text", "text_only")
  )
  with ChatServer([GOOD]) as srv:
    url = srv.client().config.base_url
    assert (
      generate_llm.main(
        [
          "--base-url",
          url,
          "--model",
          "m",
          "--n",
          "1",
          "--seed",
          "7",
          "--start",
          str(start),
          "--out",
          str(tmp_path),
        ]
      )
      == 0
    )
  summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert summary["kept"] == 1 and summary["balance_score"] == pytest.approx(1 / 9)
  assert (tmp_path / f"{sample_axes(7, start).id}-sales-by-region" / "task.toml").is_file()
