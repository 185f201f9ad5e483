"""The math evaluation (the AIME check): boxed-answer extraction and normalisation, the problem file
(the bundled fixture tests/data/math/aime_fixture.jsonl, parquet, every mistake named), scoring end
to end with a scripted policy in place of the server (pass@1 / pass@k / errors measured as
documented), the verdict, the launcher's error path, and (slow) a tiny random model served here."""

import json
import math
import pathlib
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tmax_jax.config_dict import from_config_dict, load_config_file
from tmax_jax.errors import UserError
from tmax_jax.inference.client import Completion, RolloutError
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import math_eval as M
from tmax_jax.loop.config import ModelSpec, ServingConfig
from tmax_jax.models import registry
from tmax_jax.tokenizers import load_tokenizer

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "data" / "math" / "aime_fixture.jsonl"


# --- answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
  "text, boxed",
  [
    (r"so \boxed{12}", "12"),
    (r"\boxed{1} then \boxed{2}", "2"),  # the last one
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces kept whole
    (r"\boxed{a\{b\}c}", r"a\{b\}c"),  # escaped braces are not groups
    (r"\boxed { 5 }", " 5 "),
    (r"the answer is \boxed 42$ and", "42"),  # the brace-less form
    (r"\fbox{7}", "7"),
    (r"\boxed{3} and \fbox{4}", "4"),  # whichever box is last
    (r"\fbox{3} and \boxed{4", "3"),  # an unclosed last box does not count
    (r"\boxedx{3}", None),
    (r"no box here: 42", None),
    ("", None),
  ],
)
def test_last_boxed(text, boxed):
  assert M.last_boxed(text) == boxed


@pytest.mark.parametrize(
  "raw, norm",
  [
    ("007", "7"),
    ("+7", "7"),
    ("-0", "0"),
    ("7.", "7"),
    ("7.00", "7"),
    ("1,000", "1000"),
    (" 4 2 ", "42"),
    ("$5$", "5"),
    (r"\text{ 33 }", "33"),
    (r"{\text{7}}", "7"),
    (r"\mathrm{12}.", "12"),
    (r"45^\circ", "45"),
    (r"50\%", "50"),
    (r"1\,000", "1000"),
    (7, "7"),
    (r"\frac{1}{2}", r"\frac{1}{2}"),  # not an integer: left as written (spaces aside)
    ("1,2", "1,2"),  # not a thousands group
  ],
)
def test_normalize(raw, norm):
  assert M.normalize(raw) == norm


@pytest.mark.parametrize(
  "reply, answer",
  [
    ("<think>\nmaybe \\boxed{3}\n</think>\n\nSo \\boxed{007}.", "7"),  # after the reasoning
    ("<think>\nonly here \\boxed{3}", None),  # reasoning never closed: no final answer
    ("\\boxed{}", None),
    ("The answer is 9.", None),
  ],
)
def test_score_reply_reads_the_answer_part(reply, answer):
  extracted, correct = M.score_reply(reply, "7")
  assert extracted == answer and correct == (answer == "7")


def test_aime_answers():
  assert all(M.is_aime_answer(a) for a in ("0", "005", 999, "42"))
  assert not any(M.is_aime_answer(a) for a in ("1000", "-1", "1/2", "x", "3.5"))


# --- the problem file ------------------------------------------------------------------------


def test_bundled_fixture_loads():
  problems = M.load_problems(FIXTURE, integer_answers=True)
  assert [p.id for p in problems] == [f"fixture-{i}" for i in range(1, 7)]
  assert problems[1].answer == "24"  # a number in the file is read as its text
  assert M.normalize(problems[5].answer) == "5"
  assert len(M.load_problems(FIXTURE, max_problems=2)) == 2


def test_parquet_with_capitalised_columns(tmp_path):
  path = tmp_path / "aime.parquet"
  table = {"ID": ["2024-I-1", "2024-I-2"], "Problem": ["p1", "p2"], "Answer": [204, 25]}
  pq.write_table(pa.table(table), path)
  problems = M.load_problems(path, integer_answers=True)
  assert [(p.id, p.problem, p.answer) for p in problems] == [
    ("2024-I-1", "p1", "204"),
    ("2024-I-2", "p2", "25"),
  ]
  fields = M.Fields(problem="Problem", answer="Answer", id="")
  assert [p.id for p in M.load_problems(path, fields)] == ["1", "2"]  # the row numbers


@pytest.mark.parametrize(
  "lines, expected",
  [
    (['{"problem": "p"}'], r"x.jsonl:1: no field 'answer' \(found \['problem'\]\)"),
    (['{"problem": "p", "answer": 1}', "{oops"], r"x.jsonl:2: not JSON"),
    (['["p", 1]'], r"x.jsonl:1: expected an object"),
    (['{"problem": " ", "answer": 1}'], r"x.jsonl:1: field 'problem' is empty"),
    (['{"problem": "p", "answer": [1]}'], r"x.jsonl:1: field 'answer': expected a string"),
    (
      ['{"id": "a", "problem": "p", "answer": 1}', '{"id": "a", "problem": "q", "answer": 2}'],
      r"x.jsonl:2: id 'a' repeats .*x.jsonl:1",
    ),
    (['{"problem": "p", "answer": "1/2"}'], r"x.jsonl:1: answer '1/2' is not an integer 0-999"),
    ([""], r"problems=.*x.jsonl: no problems in the file"),
  ],
)
def test_problem_file_mistakes_are_named(tmp_path, lines, expected):
  path = tmp_path / "x.jsonl"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(UserError, match=expected):
    M.load_problems(path, integer_answers=True)


def test_missing_or_misnamed_file(tmp_path):
  with pytest.raises(UserError, match=r"config.problems=.*nope.jsonl: no such file"):
    M.load_problems(tmp_path / "nope.jsonl", what="config.problems")
  (tmp_path / "p.csv").write_text("problem,answer\n")
  with pytest.raises(UserError, match=r"expected a file ending in one of"):
    M.load_problems(tmp_path / "p.csv")


# --- the config -------------------------------------------------------------------------------


def test_shipped_config_is_the_recipe_sampling():
  cfg = from_config_dict(M.MathEvalConfig, load_config_file(REPO / "configs" / "eval_aime.py"))
  assert (cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.top_k) == (1.0, 1.0, 0)
  assert (cfg.max_tokens, cfg.max_prompt_tokens, cfg.integer_answers) == (16384, 2048, True)
  engine = cfg.serving.engine
  assert engine.max_len >= cfg.max_prompt_tokens + cfg.max_tokens


def test_config_mistakes():
  with pytest.raises(ValueError, match="set family"):
    M.MathEvalConfig(address="127.0.0.1:9000")
  with pytest.raises(ValueError, match="set `address`"):
    M.MathEvalConfig()
  with pytest.raises(ValueError, match="family='qwen3_5', but the model"):
    M.MathEvalConfig(model=ModelSpec(preset="qwen3-0.6b"), family="qwen3_5")
  with pytest.raises(ValueError, match=r"serving.engine.max_len=1024 < max_prompt_tokens"):
    M.MathEvalConfig(model=ModelSpec(preset="qwen3-0.6b"), max_tokens=2000)
  with pytest.raises(ValueError, match="no {problem} field"):
    M.MathEvalConfig(address="a:1", family="qwen3", prompt_template="solve it")
  assert M.MathEvalConfig(model=ModelSpec(preset="qwen3-0.6b"), max_tokens=8).family == "qwen3"


# --- end to end with a scripted policy --------------------------------------------------------

K = 4
# problem id -> reply of each sample (a RolloutError instance: that sample's request fails)
SCRIPT = {
  "fixture-1": ["<think>\nsay \\boxed{1}\n</think>\n\nSo the answer is \\boxed{67}."] * K,
  "fixture-2": ["\\boxed{24}", "\\boxed{024}", "\\boxed{25}", "It is 24."],
  "fixture-3": ["<think>\nprobably \\boxed{13} but let me check"] * K,  # cut in its reasoning
  "fixture-4": ["The answer is 9."] * K,
  "fixture-5": [RolloutError("server said no")] + ["$\\boxed{44}$"] * (K - 1),
  "fixture-6": ["\\boxed{5}"] * K,
}
EXPECTED_PASS1 = {"fixture-1": 1.0, "fixture-2": 0.5, "fixture-3": 0.0, "fixture-4": 0.0}
EXPECTED_PASS1 |= {"fixture-5": 1.0, "fixture-6": 1.0}


class ScriptedClient:
  """RolloutClient.generate's signature; replies from SCRIPT by the request id."""

  def __init__(self, tokenizer):
    self.tok, self.requests = tokenizer, []

  async def generate(self, prompt_token_ids, max_tokens, params, stop_token_ids=(), **kw):
    self.requests.append((list(prompt_token_ids), max_tokens, params, list(stop_token_ids), kw))
    _, pid, i = kw["request_id"].split("/")
    reply = SCRIPT[pid][int(i)]
    if isinstance(reply, Exception):
      raise reply
    cut = pid == "fixture-3"  # ran out of tokens mid-reasoning: no end-of-turn token
    ids = self.tok.encode(reply + ("" if cut else self.tok.eos_token), add_special_tokens=False)
    n = len(ids)
    return Completion(ids, [0.0] * n, [0] * n, "length" if cut else "stop")


@pytest.fixture(scope="module")
def tok():
  return load_tokenizer("qwen3")


def _cfg(out, **kw) -> M.MathEvalConfig:
  base = dict(
    problems=str(FIXTURE),
    output_dir=str(out),
    address="127.0.0.1:1",  # not used: the scripted client answers
    family="qwen3",
    samples_per_problem=K,
    integer_answers=True,
    max_tokens=64,
  )
  return M.MathEvalConfig(**{**base, **kw})


def test_scripted_policy_is_scored_end_to_end(tmp_path, tok):
  client = ScriptedClient(tok)
  res = M.evaluate_math(_cfg(tmp_path / "o"), tokenizer=tok, client=client)
  agg = res["aggregate"]
  rates = list(EXPECTED_PASS1.values())
  mean = sum(rates) / len(rates)
  std = math.sqrt(sum((r - mean) ** 2 for r in rates) / (len(rates) - 1))
  assert agg["pass@1"]["mean"] == pytest.approx(mean)
  assert agg["pass@1"]["stderr"] == pytest.approx(std / math.sqrt(len(rates)))
  # pass@2 from the unbiased estimator; fixture-5 has 3 scored samples, so no pass@4
  p2 = [1.0, 1 - 1 / 6, 0.0, 0.0, 1.0, 1.0]
  assert agg["pass@k"] == {"2": pytest.approx(sum(p2) / 6)}
  assert (agg["num_problems"], agg["num_samples"], agg["num_errors"]) == (6, 23, 1)
  assert agg["error_share"] == pytest.approx(1 / 24)
  assert agg["error_reasons"] == [{"reason": "RolloutError: server said no", "samples": 1}]
  assert agg["truncated_share"] == pytest.approx(4 / 23)
  assert agg["answered_share"] == pytest.approx((23 - 4 - 4 - 1) / 23)
  assert agg["finish_reasons"] == {"stop": 19, "length": 4}
  M.check_measured(res)  # 1 of 24 errored: under max_error_share

  records = [
    json.loads(line) for line in (tmp_path / "o" / "records.jsonl").read_text().splitlines()
  ]
  assert [r["id"] for r in records] == list(EXPECTED_PASS1)  # file order
  assert {r["id"]: r["pass@1"] for r in records} == EXPECTED_PASS1
  second = records[1]["samples"]
  assert [s["extracted"] for s in second] == ["24", "24", "25", None]
  assert [s["correct"] for s in second] == [True, True, False, False]
  failed = records[4]["samples"][0]
  assert failed["status"] == "error" and failed["error"].startswith("RolloutError")
  assert records[0]["samples"][0]["response"].endswith("\\boxed{67}.")
  on_disk = json.loads((tmp_path / "o" / "results.json").read_text())
  assert on_disk["aggregate"] == json.loads(json.dumps(agg))
  assert on_disk["problems"]["fixture-2"]["num_correct"] == 2
  assert on_disk["config"]["output_dir"] == str(tmp_path / "o")

  # what was sent: the problem in the template, the family's chat format and stop ids, the
  # recipe's sampling with a distinct seed per sample
  prompt = tok.decode(client.requests[0][0])
  assert prompt.startswith("<|im_start|>user\n") and "put your final answer within" in prompt
  assert {r[1] for r in client.requests} == {64}
  stop_ids = list(registry.tokenizer_spec("qwen3").stop_token_ids())
  assert all(r[3] == stop_ids for r in client.requests)
  seeds = [r[2].seed for r in client.requests]
  assert len(set(seeds)) == len(seeds) and {r[2].temperature for r in client.requests} == {1.0}
  text = M.summary_text(res)
  assert "pass@1 = 0.5833" in text and "ERRORED: 1 of 24" in text


def test_verdict_and_a_second_run(tmp_path, tok):
  cfg = _cfg(tmp_path / "o", max_problems=1, samples_per_problem=2, max_error_share=0.0)
  first = M.evaluate_math(cfg, tokenizer=tok, client=ScriptedClient(tok))
  M.check_measured(first)
  second = M.evaluate_math(cfg, tokenizer=tok, client=ScriptedClient(tok))
  assert second["config"]["output_dir"] == str(tmp_path / "o") + "-2"  # the first run is kept
  assert (
    json.loads((tmp_path / "o" / "results.json").read_text())["started_at"] == first["started_at"]
  )
  # fixture-5's first sample errors: 1 of 2 > max_error_share 0
  only5 = str(_only(tmp_path, "fixture-5"))
  bad = _cfg(tmp_path / "b", problems=only5, samples_per_problem=2, max_error_share=0.0)
  res = M.evaluate_math(bad, tokenizer=tok, client=ScriptedClient(tok))
  with pytest.raises(UserError, match=r"1 of 2 samples errored \(50% > max_error_share=0%\)"):
    M.check_measured(res)
  none = M.evaluate_math(
    _cfg(tmp_path / "n", problems=only5, samples_per_problem=1),
    tokenizer=tok,
    client=ScriptedClient(tok),
  )
  assert none["aggregate"]["pass@1"] == {"mean": None, "stderr": None}
  assert none["aggregate"]["unscored_problems"] == ["fixture-5"]
  with pytest.raises(UserError, match=r"no sample was scored \(1 of 1 errored; most frequent"):
    M.check_measured(none)


def _only(tmp_path, pid) -> pathlib.Path:
  path = tmp_path / f"{pid}.jsonl"
  line = next(x for x in FIXTURE.read_text().splitlines() if f'"{pid}"' in x)
  path.write_text(line + "\n")
  return path


def test_prompt_over_the_cap_is_an_error_not_a_score(tmp_path, tok):
  client = ScriptedClient(tok)
  res = M.evaluate_math(
    _cfg(tmp_path / "o", max_prompt_tokens=10, samples_per_problem=1), tokenizer=tok, client=client
  )
  assert client.requests == [] and res["aggregate"]["num_errors"] == 6
  assert res["aggregate"]["error_reasons"][0]["reason"].startswith("prompt_too_long: ")


# --- the launcher -------------------------------------------------------------------------------


def test_launcher_names_a_missing_problem_file(tmp_path):
  cmd = [
    sys.executable,
    "launch/math_eval.py",
    "--config=configs/eval_aime.py",
    f"--config.problems={tmp_path}/nope.jsonl",
    f"--config.output_dir={tmp_path}/o",
    "--config.address=",
    "--config.family=",
    "--config.model.preset=qwen3-0.6b",
  ]
  out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode == 2, out.stderr[-3000:]
  assert "Traceback" not in out.stderr
  assert f"error: config.problems={tmp_path}/nope.jsonl: no such file" in out.stderr


# --- slow: a tiny random model served here ------------------------------------------------------


@pytest.mark.slow
def test_tiny_random_model_is_measured_not_errored(tmp_path, tok):
  tiny = dict(
    vocab_size=151936,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=16,
  )
  cfg = M.MathEvalConfig(
    problems=str(FIXTURE),
    output_dir=str(tmp_path / "o"),
    model=ModelSpec(preset="qwen3-0.6b", overrides=tiny),
    serving=ServingConfig(
      engine=EngineConfig(max_concurrent_decodes=4, max_len=256, max_prefill_length=128)
    ),
    samples_per_problem=2,
    max_problems=2,
    max_prompt_tokens=128,
    max_tokens=8,
    integer_answers=True,
  )
  res = M.evaluate_math(cfg, tokenizer=tok)
  agg = res["aggregate"]
  assert agg["num_errors"] == 0, agg["error_reasons"]
  assert (agg["num_problems"], agg["num_samples"]) == (2, 4)
  assert agg["pass@1"] == {"mean": 0.0, "stderr": 0.0}  # random weights: wrong, but measured
  records = [json.loads(x) for x in (tmp_path / "o" / "records.jsonl").read_text().splitlines()]
  for sample in (s for r in records for s in r["samples"]):
    assert sample["status"] == "scored" and 1 <= sample["response_tokens"] <= 8
  M.check_measured(res)
