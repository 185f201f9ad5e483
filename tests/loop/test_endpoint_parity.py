"""Our own server scores the same through its OpenAI API (policy=endpoint) as through the episode
worker's gRPC client (policy=server): bench/endpoint_parity.py's core on three procedural tasks,
k = 2, one seed. The scripted model picks one of three tool calls per episode by its sampling seed
(a solving `tail`, a solving `cp`, the submit), so trials of one task pass or fail by seed and both
paths must reproduce each trial: its reward, status, turns, tool calls and generated tokens."""

import importlib.util
import pathlib

import pytest

from tests.conftest import require_base_rootfs
from tests.inference import scripted_model
from tmax_jax import tokenizers

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "endpoint_parity.py"


def _bench():
  spec = importlib.util.spec_from_file_location("endpoint_parity", BENCH)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_the_scripted_replies_are_the_only_paths():
  """The three tool calls share their JSON prefix and suffix without mixing; a reply whose token
  repeats is refused (it would loop)."""
  bench = _bench()
  tok = tokenizers.load_tokenizer(scripted_model.FAMILY)
  chains = [tok.encode(bench.tool_call(c), add_special_tokens=False) for c in bench.COMMANDS]
  successors = scripted_model._successors([[-1, *c, -2] for c in chains])
  forks = {t: n for t, n in successors.items() if len(n) > 1}
  assert len(forks) == 1 and len(next(iter(forks.values()))) == 3
  with pytest.raises(AssertionError, match="must be distinct"):
    scripted_model._successors([[0, 5, 6, 5, 1]])
  with pytest.raises(AssertionError, match="mix them"):
    scripted_model._successors([[0, 5, 6, 7, 1], [0, 8, 6, 9, 1]])


@pytest.mark.slow  # 1-2 min: 12 sandboxed trials and the engine's compilation
def test_both_paths_give_the_same_trials(tmp_path):
  require_base_rootfs()
  bench = _bench()
  tasks = [("line_tool", 0), ("line_tool", 2), ("line_tool", 1)]  # last, copy, count
  report = bench.run(bench.write_tasks(tmp_path / "tasks", tasks), tmp_path, warmup=False)
  assert report["agree"], report["differing_trials"]
  rows = report["tasks"]
  assert rows["line_tool-d0-s0"]["server"] == rows["line_tool-d0-s0"]["endpoint"] == [0.0, 1.0]
  assert rows["line_tool-d0-s1"]["server"] == [0.0, 0.0]  # never solved
  for path in bench.PATHS:
    row = report["paths"][path]
    assert row["trials"] == 6 and row["errors"] == 0
    assert row["pass@1"] == pytest.approx(1 / 6)
  server, endpoint = report["paths"]["server"], report["paths"]["endpoint"]
  assert server["mean_turns"] == endpoint["mean_turns"] > 1  # some episodes ran 3 tool calls
  assert server["mean_generated_tokens"] == endpoint["mean_generated_tokens"]
  # the endpoint's trajectories hold the template's re-rendered replies, longer than the compact
  # JSON the model wrote
  assert endpoint["mean_response_tokens"] > endpoint["mean_generated_tokens"]
