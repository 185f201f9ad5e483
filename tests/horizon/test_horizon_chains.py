"""Progressive extension on the offline path: the horizon task layout (no sandbox) and the
procedural extension chains in real sandboxes: every child keeps its parent's tests unchanged,
passes them and its own after its oracle, starts from the parent's final state (parents' checks
already pass there, its own fail) and rejects the family's plausible wrong solution. The default
suite runs every node of every chain at one level (levels rotate over the chains, ~15 s a chain);
the slow suite runs every chain at every level, and the build CLI with the full audit (static and
probe checks) over every chain."""

import json

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.horizon import build, compose, offline, record
from tmax_jax.tasks import runner
from tmax_jax.tasks.procedural import chains, core, registry


def _tree(name, seed=0, level=0):
  return {n.path: n for n in offline.chain_tree(name, seed, level)}


@pytest.mark.parametrize("name", sorted(registry.CHAINS))
def test_tree_shape_and_layout(name):
  tree = _tree(name)
  assert max(len(p) for p in tree) >= 3, "a chain needs >= 3 generations"
  children = {}
  for path in tree:
    if len(path) > 1:
      children.setdefault(path[:-1], []).append(path)
  assert any(len(c) >= 2 for c in children.values()), "a chain needs a branching node"
  for path, node in tree.items():
    n = len(path) - 1
    task, line = node.task, node.lineage
    assert compose.generations(task) == n + 1 and line.generation == n
    assert compose.lineage_of(task) == line and task.config.task.name == line.id
    if n:
      parent = tree[path[:-1]].task
      assert line.parent == compose.lineage_of(parent).id and line.root == tree[path[:1]].lineage.id
      # the parent's tests are kept byte for byte; the child adds its own generation
      kept = {k: v for k, v in task.tests.items() if not k.startswith(f"g{n}/") and k != "test.sh"}
      assert kept == {k: v for k, v in parent.tests.items() if k != "test.sh"}
      # the child's environment replays the parent's environment and then the parent's oracle
      assert task.environment[f"stages/g{n - 1}/solution/solve.sh"] == parent.solution["solve.sh"]
      for rel, data in parent.environment.items():
        if rel.startswith("stages/"):
          assert task.environment[rel] == data
    docker = task.environment["Dockerfile"].decode()
    assert docker.count("/solution/solve.sh") == n and docker.startswith("FROM tmax-base:bookworm")


def test_deterministic_and_root_equals_its_family():
  a, b = _tree("photo_sync", 5, 1), _tree("photo_sync", 5, 1)
  assert all(a[p].task.environment == b[p].task.environment for p in a)
  root = next(p for p in a if len(p) == 1)
  assert a[root].spec == registry.build_spec("photo_import", 5, 1)
  with pytest.raises(ValueError, match="cannot follow"):
    chains.lineage_specs(registry.get_chain("photo_sync"), ("photo_import", "trash_restore"), 0, 0)


def test_child_task_refuses_a_wrong_lineage():
  tree = _tree("kv_log")
  root = next(n for p, n in tree.items() if len(p) == 1)
  stage = offline.stage_from_spec("x", root.spec, "x")
  bad = compose.Lineage("kid", root.lineage.root, 3, "x", "x", parent=root.lineage.id)
  with pytest.raises(ValueError, match="does not continue"):
    compose.child_task(root.task, stage, bad)
  with pytest.raises(ValueError, match="tests must contain check.py or test_"):
    compose.Stage("s", "i", "r", "#!/bin/bash\n", tests={"notes.txt": b""})


def _check_node(node):
  n, task = len(node.path) - 1, node.task
  gen = f"g{n}"
  oracle = runner.run_oracle(task)
  assert oracle.rewards == {"reward": 1.0, **{f"g{i}": 1.0 for i in range(n + 1)}}, (
    node.lineage.id,
    oracle.logs,
  )
  untouched = runner.run_noop(task)
  assert untouched.rewards[gen] == 0.0 and untouched.reward == 0.0, node.lineage.id
  assert all(untouched.rewards[f"g{i}"] == 1.0 for i in range(n)), (
    f"{node.lineage.id}: the child environment must start from the parent's final state, where "
    f"the parents' checks pass: {untouched.rewards}"
  )
  wrong = runner.run_script(task, core.bash_script(node.spec.wrong))
  assert wrong.rewards[gen] == 0.0, (node.lineage.id, wrong.logs)


CHAINS = sorted(registry.CHAINS)


@pytest.mark.parametrize("name", CHAINS)
def test_chain_sample_level_in_sandbox(name):
  """Default suite: one level per chain, rotating so every level is covered across chains."""
  require_base_rootfs()
  for node in _tree(name, 11, CHAINS.index(name) % len(core.LEVELS)).values():
    _check_node(node)


@pytest.mark.slow
@pytest.mark.parametrize("level", core.LEVELS)
@pytest.mark.parametrize("name", CHAINS)
def test_every_chain_every_level_in_sandbox(name, level):
  require_base_rootfs()
  for node in _tree(name, 11, level).values():
    _check_node(node)


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
def test_build_cli_accepts_every_chain(tmp_path, capsys):
  """`python3 -m tmax_jax.horizon.build` over every chain: the whole audit (oracle,
  untouched, static, shortcut probes) accepts every node and the lineage has every chain's tree."""
  require_base_rootfs()
  out = tmp_path / "build"
  assert build.main(["--out", str(out), "--chains", *CHAINS, "--seeds", "3", "--level", "1"]) == 0
  summary = json.loads((out / "summary.json").read_text())
  nodes = sum(len(list(chains.tree_paths(registry.get_chain(n), 3))) for n in CHAINS)
  assert summary["counts"] == {"accepted": nodes, "rebuilt": 0, "rejected": 0, "skipped": 0}, (
    summary
  )
  assert summary["depth"] == 3 and summary["branching_nodes"] == len(CHAINS), summary
  tree = json.loads((out / "lineage.json").read_text())
  assert {nid.split("-s3-d1")[0] for nid in tree["nodes"]} == set(CHAINS)
  assert all(
    record.load_record(out / "tasks" / nid)["status"] == "accepted" for nid in tree["nodes"]
  )
  assert "accepted" in capsys.readouterr().out
