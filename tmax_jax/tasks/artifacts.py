"""A trial's artifacts, what makes it comparable with another run's: the verifier's files and the
packages its sandbox had resolved when it started and after the tests ran. runner.run_trial keeps
them when asked (artifacts=True: RunResult.artifacts, or RewardError.artifacts); evaluation writes
them beside each trial's record (loop/evaluate/trials.py); RL asks for none."""

from __future__ import annotations

import pathlib

from tmax_jax.sandbox import Sandbox, SandboxError

# RunResult.artifacts maps these names (the verifier's files under "verifier/") to their text.
# Each keeps at most ARTIFACT_BYTES, the tail, under a TRUNCATED_NOTE line; a verifier directory
# of more than ARTIFACT_FILES files keeps the first ones by name ("verifier.skipped.txt" lists
# the others).
VERIFIER_ARTIFACTS = "verifier"
PACKAGES_START = "packages.start.txt"  # the environment as started, before the agent acts
PACKAGES_AFTER_TESTS = "packages.after_tests.txt"  # after test.sh (which often installs pytest)
ARTIFACT_BYTES = 1 << 20
ARTIFACT_FILES = 64
TRUNCATED_NOTE = "[tmax_jax: truncated to the last {kept} of {size} bytes]\n"
# One exec per listing, never failing the trial (a failure or a timeout is written in the file);
# it leaves nothing behind (no bytecode) and asks no index.
PACKAGES_TIMEOUT_S = 60.0
PACKAGES_COMMAND = (
  "export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1; "
  "echo '# dpkg-query -W'; dpkg-query -W 2>&1 || echo \"(dpkg-query failed: exit $?)\"; "
  "echo '# python3 -m pip freeze --all'; "
  'python3 -m pip freeze --all 2>/dev/null || echo "(python3 -m pip freeze failed: exit $?)"'
)


def _capped(data: bytes) -> str:
  """A file's text as an artifact: the last ARTIFACT_BYTES under TRUNCATED_NOTE when longer."""
  if len(data) <= ARTIFACT_BYTES:
    return data.decode(errors="replace")
  note = TRUNCATED_NOTE.format(kept=ARTIFACT_BYTES, size=len(data))
  return note + data[-ARTIFACT_BYTES:].decode(errors="replace")


def verifier_files(host: pathlib.Path) -> dict[str, str]:
  """The downloaded verifier directory's files (test-stdout.txt, reward.*, any report the tests
  wrote: ctrf.json, junit xml, ...) as artifacts "verifier/<path>", capped (ARTIFACT_*)."""
  files = sorted(f for f in host.rglob("*") if f.is_file() and not f.is_symlink())
  out = {
    f"{VERIFIER_ARTIFACTS}/{f.relative_to(host)}": _capped(f.read_bytes())
    for f in files[:ARTIFACT_FILES]
  }
  if len(files) > ARTIFACT_FILES:
    skipped = "".join(f"{f.relative_to(host)}\n" for f in files[ARTIFACT_FILES:])
    out[f"{VERIFIER_ARTIFACTS}.skipped.txt"] = skipped
  return out


def list_packages(sb: Sandbox) -> str:
  """`dpkg-query -W` and `python3 -m pip freeze --all` in the sandbox, each under a "# <command>"
  line: one exec under PACKAGES_TIMEOUT_S that never raises (a failure is the text)."""
  try:
    res = sb.exec(
      ["bash", "-c", PACKAGES_COMMAND],
      timeout_s=PACKAGES_TIMEOUT_S,
      max_output_chars=ARTIFACT_BYTES,
    )
  except (SandboxError, OSError) as err:
    return f"(packages not listed: {type(err).__name__}: {err})\n"
  return res.output if res.status == "ok" else f"(status {res.status})\n{res.output}"
