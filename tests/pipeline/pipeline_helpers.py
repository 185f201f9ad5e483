"""Shared by the task-pipeline tests: a restricted taxonomy, the CLI argv, state readers."""

import json
import pathlib

from tmax_jax.pipeline import scripted
from tmax_jax.tasks import vocabulary
from tmax_jax.tasks.generator.axes import TAXONOMY_FILE

# The client retries an answer later than its per-attempt timeout (--timeout-s); a test's other
# answers must arrive well inside it. Under the flake hunt's load (2 busy loops and 2 suite workers
# with image builds on 2 cores) a loopback answer once took over 1 s, the test's timeout then:
# a scripted "malformed" reply timed out and was retried in the client, and the write stage's
# attempt count was one short (seed 671161982).
CLIENT_TIMEOUT_S = 10
LATE = scripted.Answer(content="late", delay_s=CLIENT_TIMEOUT_S + 2)  # past the client's timeout

PIPELINE_FLAGS = ["--model", "scripted", "--memory-mb", "2048", "--no-progress"]


def taxonomy(tmp_path: pathlib.Path, fixtures=None, verifiers=None) -> str:
  """The shipped taxonomy with the fixture / verifier axes restricted to the given values."""
  doc = json.loads(TAXONOMY_FILE.read_text())
  for axis, allowed, values in (
    ("fixture", fixtures, vocabulary.FIXTURE_NAMES),
    ("verifier", verifiers, vocabulary.VERIFIER_KINDS),
  ):
    if allowed:
      doc["axes"][axis] = {"weights": [1.0 if v in allowed else 0.0 for v in values]}
  path = tmp_path / "taxonomy.json"
  path.write_text(json.dumps(doc))
  return str(path)


def argv(endpoint: str, out, *extra) -> list[str]:
  return ["--endpoint", endpoint, "--out", str(out), *PIPELINE_FLAGS, *map(str, extra)]


def states(out) -> dict[str, dict]:
  return {
    p.stem: json.loads(p.read_text()) for p in sorted((pathlib.Path(out) / "state").glob("*.json"))
  }


def stage_records(out) -> dict[tuple[str, str], dict]:
  """(task id, stage) -> its record, over every state file."""
  return {(tid, st): rec for tid, s in states(out).items() for st, rec in s["stages"].items()}
