"""tasks/verifiers/knobs.py: each verifier kind's knob moves harder/easier to its limits, the
instruction's {{placeholders}} follow the spec, and a literally stated threshold locks the knob;
the writer's parse rejects placeholders the verifier cannot fill."""

import dataclasses
import json

import pytest

from tmax_jax.pipeline import templates
from tmax_jax.tasks import verifiers as V
from tmax_jax.tasks.generator import llm
from tmax_jax.tasks.generator.axes import sample_axes
from tmax_jax.tasks.verifiers import knobs


def _spec(files):
  return json.loads(files["spec.json"])


def _walk(spec, direction, template=""):
  seen = [knobs.setting(spec)]
  while (spec := knobs.move(spec, direction, template)) is not None:
    seen.append(knobs.setting(spec))
  return seen


def test_exact_text_strictness():
  spec = _spec(V.exact_text([{"path": "a", "expected": "x"}], strictness=0))
  assert _walk(spec, "harder") == [f"exact_text:strictness={i}" for i in (0, 1, 2)]
  assert knobs.move(spec, "easier") is None


def test_metric_threshold_bounded_and_unbounded():
  acc = _spec(V.metric_threshold("accuracy", 0.8, predictions="p", reference=[1]))
  assert [knobs.move(acc, "harder")["threshold"], knobs.move(acc, "easier")["threshold"]] == [
    0.9,
    0.6,
  ]
  hard = _walk(acc, "harder")
  assert hard[:3] == [f"metric_threshold:threshold={v}" for v in ("0.8", "0.9", "0.95")]
  assert len(hard) < 12  # stops near 1.0
  rmse = _spec(
    V.metric_threshold("rmse", 2.0, higher_is_better=False, predictions="p", reference=[1])
  )
  assert knobs.move(rmse, "harder")["threshold"] == 1.6
  assert knobs.move(rmse, "easier")["threshold"] == 2.5
  speed = _spec(V.metric_threshold("speedup", 1.3, baseline="a", candidate="b"))
  assert knobs.move(speed, "harder")["threshold"] == pytest.approx(1.625)


def test_threshold_placeholder_and_lock():
  acc = _spec(V.metric_threshold("accuracy", 0.8, predictions="p", reference=[1]))
  templ = "Get at least {{threshold}} right."
  assert knobs.render(templ, acc) == "Get at least 0.8 right."
  assert knobs.render(templ, knobs.move(acc, "harder", templ)) == "Get at least 0.9 right."
  literal = "Get at least 0.8 right."
  assert knobs.locked(acc, literal) and knobs.move(acc, "harder", literal) is None
  assert not knobs.locked(acc, "Get 18.0 right.")  # another number is not the threshold


def test_corpus_fuzz_and_probes():
  corpus = _spec(V.adversarial_corpus("c", ["a", "b", "c"], ["x", "y", "z"], sample=2))
  assert _walk(corpus, "harder") == [
    "adversarial_corpus:sample=2",
    "adversarial_corpus:sample=4",
    "adversarial_corpus:sample=6",
  ]
  assert knobs.move(corpus, "harder")["sample"] == 4
  assert knobs.move(knobs.move(corpus, "harder"), "harder")["sample"] is None  # = all items
  assert _walk(corpus, "easier") == ["adversarial_corpus:sample=2", "adversarial_corpus:sample=1"]
  fuzz = _spec(V.fuzz_equivalence("c", {"type": "ints"}, n=5, reference_code="x"))
  assert knobs.move(fuzz, "harder")["n"] == 20 and knobs.move(fuzz, "easier")["n"] == 1
  assert knobs.move(knobs.move(fuzz, "easier"), "easier") is None
  probes = [{"protocol": "http", "port": 80}, {"protocol": "tcp", "port": 81}]
  proto = _spec(V.multi_protocol(probes))
  assert knobs.move(proto, "harder") is None
  assert knobs.move(proto, "easier")["probes"] == probes[:1]
  assert knobs.move(knobs.move(proto, "easier"), "easier") is None
  with pytest.raises(ValueError, match="direction"):
    knobs.move(proto, "sideways")


def test_writer_placeholders_are_checked_and_rendered():
  sample = dataclasses.replace(sample_axes(0, 0), verifier="metric_threshold", fixture="text_only")
  task, _ = llm.parse_task_reply(templates.task_reply("metric_threshold", "text_only"), sample)
  assert "At least a fraction 0.8 of the labels" in task.instruction
  assert "{{" not in task.instruction
  bad = json.loads(templates.task_reply("metric_threshold", "text_only"))
  bad["instruction"] += " Use {{n}} inputs."
  with pytest.raises(llm.ReplyError, match=r"instruction: placeholder \{\{n\}\}"):
    llm.parse_task_reply(json.dumps(bad), sample)
