"""The soak's task set: ordinary tasks and tasks whose verifier misbehaves, each a real TB2 task
built from a Dockerfile (one shared layer: holding its build lock delays every trial start).

Verifier faults and what the rule (docs/design/episodes.md "Scoring") makes of them:
  verifier_crash    test.sh dies by SIGSEGV before writing a reward  -> dropped (verifier_error)
  verifier_garbage  test.sh writes a reward.txt that is no number      -> dropped (verifier_error)
  command_hang      test.sh and a setsid child ignore SIGTERM, sleep   -> 0 (verifier_timeout)
  memory            three processes fill the sandbox's memory cgroup   -> 0 (verifier_oom)
  disk              test.sh fills the sandbox's disk to ENOSPC, cleans -> its reward (ok)
The tiny policy runs no useful command, so the faulting commands are the tests'; the sandbox's
limits (memory cgroup, its own tmpfs, the verifier timeout) must contain them.
"""

from __future__ import annotations

import pathlib

from tmax_jax.tasks.format import (
  AgentConfig,
  EnvironmentConfig,
  Task,
  TaskConfig,
  TaskInfo,
  VerifierConfig,
  write_task,
)

MEMORY_MB = 256  # the soak's sandboxes (RunnerConfig.memory_mb): three 45% hogs overflow it
DISK_MB = 64  # the chaos tasks' storage_mb: the sandbox tmpfs the disk task fills
VERIFIER_TIMEOUT_S = 3  # the hang task's; the soak runs with runner.min_verifier_timeout_s=0
WORDS = ("apple", "river", "stone", "cloud")

REWARD = "/logs/verifier/reward.txt"
CHECK_ANSWER = (
  f'if [ "$(cat /workspace/answer.txt 2>/dev/null)" = "{{word}}" ]; '
  f"then echo 1 > {REWARD}; else echo 0 > {REWARD}; fi\n"
)
TESTS = {
  "verifier_crash": "echo checking the answer\nkill -SEGV $$\n",
  "verifier_garbage": f"echo 'all good!' > {REWARD}\n",
  "command_hang": (
    "setsid sh -c 'trap \"\" TERM; sleep 100000' >/dev/null 2>&1 &\n"
    f"trap '' TERM\nsleep 100000\necho 1 > {REWARD}\n"
  ),
  "memory": (
    f"for i in 1 2 3; do python3 -c 'b = bytearray({MEMORY_MB * 45 // 100} << 20); "
    "import time; time.sleep(2)' & done\nwait\n" + CHECK_ANSWER
  ),
  "disk": (
    "dd if=/dev/zero of=/tmp/fill bs=1M 2>&1 | tail -1\n"
    'size=$(du -m /tmp/fill | cut -f1); rm -f /tmp/fill; echo "filled ${size} MB"\n' + CHECK_ANSWER
  ),
}
# fault kind -> (what must happen to its episodes, the allowed reasons / drop kinds)
EXPECTED = {
  "normal": ("scored", {"ok"}),
  "verifier_crash": ("dropped", {"verifier_error"}),
  "verifier_garbage": ("dropped", {"verifier_error"}),
  "command_hang": ("scored", {"verifier_timeout"}),
  "memory": ("scored", {"verifier_oom"}),
  "disk": ("scored", {"ok"}),
}
KINDS = tuple(k for k in EXPECTED if k != "normal")


def dockerfile(tag: str) -> str:
  """Every soak task's Dockerfile: one layer of its own (`tag` keeps it apart from other runs)."""
  return f"FROM tmax-base:bookworm\nRUN echo {tag} > /etc/chaos-soak\n"


def _task(name: str, kind: str, word: str, tag: str) -> Task:
  config = TaskConfig(
    task=TaskInfo(name=name),
    metadata={"chaos": kind},
    verifier=VerifierConfig(timeout_sec=VERIFIER_TIMEOUT_S if kind == "command_hang" else 60),
    agent=AgentConfig(timeout_sec=60),
    environment=EnvironmentConfig(memory_mb=MEMORY_MB, storage_mb=DISK_MB, allow_internet=False),
  )
  body = TESTS.get(kind, CHECK_ANSWER).replace("{word}", word)
  return Task(
    f"Write the word '{word}' (and nothing else) to /workspace/answer.txt.\n",
    config,
    environment={"Dockerfile": dockerfile(tag).encode()},
    tests={"test.sh": ("#!/bin/bash\n" + body).encode()},
    solution={"solve.sh": f"#!/bin/bash\necho {word} > /workspace/answer.txt\n".encode()},
  )


def write_tasks(directory: pathlib.Path, *, faults: bool, tag: str) -> dict[str, str]:
  """Writes the soak's tasks (task name -> its fault kind, "normal" for ordinary ones). With
  faults, one task per verifier fault kind and as many ordinary ones; the last task ("zz-held")
  is the run's held-out task (tasks.num_eval = 1)."""
  kinds = ["normal"] * len(WORDS) + (list(KINDS) if faults else [])
  out = {}
  for i, kind in enumerate(kinds):
    name = f"t{i:02d}-{kind}"
    write_task(_task(name, kind, WORDS[i % len(WORDS)], tag), directory / name)
    out[name] = kind
  write_task(_task("zz-held", "normal", WORDS[0], tag), directory / "zz-held")
  return out
