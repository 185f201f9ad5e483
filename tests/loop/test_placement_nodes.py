"""Placement 'nodes' (issue 44): an RL job served on inference nodes apart from its trainer. The
config says how many nodes; each node's server is the job's policy (configs/serve_policy.py);
the trainer's processes share every node's slots; without the cluster launcher's router address
the job says how to launch it."""

import runpy

import pytest

from tmax_jax import jobs
from tmax_jax.agents.episode import stop_token_ids
from tmax_jax.errors import ConfigError
from tmax_jax.loop import placement
from tmax_jax.loop.config import MeshConfig, ServingConfig

PAPER = "configs/tmax_qwen3_5_9b_2x6_h100.py"


def _config(path: str, *args):
  return runpy.run_path(path)["get_config"](*args)


def test_each_node_serves_the_jobs_policy_with_what_the_job_derives():
  rl = jobs.job_config(_config(PAPER), "rl")
  node = jobs.job_config(_config("configs/serve_policy.py", PAPER), "serve")
  assert node.model == rl.model
  assert (node.serving.replicas, node.serving.tensor) == (2, 4)
  assert (node.serving.placement, node.serving.nodes, node.serving.address) == ("colocated", 0, "")
  engine = node.serving.engine
  assert engine.max_concurrent_decodes == 32 and engine.num_pages == 12500
  assert engine.stop_token_ids == stop_token_ids(rl.episode)  # the episode family's
  assert (node.topology.devices, node.topology.processes) == (8, 1)  # one 8-GPU node
  assert node.topology.device_memory_gb == 80.0


def test_the_trainers_processes_share_every_nodes_slots():
  rl = jobs.job_config(_config(PAPER), "rl")
  slots = rl.serving.nodes * rl.serving.replicas * rl.serving.engine.max_concurrent_decodes
  assert slots == 384
  assert rl.rollout_worker(2).max_parallel_episodes == slots // 2  # each process its half
  assert rl.rollout_worker(1).max_parallel_episodes == slots


def test_nodes_needs_its_count_and_the_routers_address():
  with pytest.raises(ValueError, match="placement 'nodes' takes the number of inference nodes"):
    ServingConfig(placement="nodes")
  with pytest.raises(ValueError, match="serving.nodes=2 with placement 'colocated'"):
    ServingConfig(nodes=2)
  with pytest.raises(ConfigError, match=r"launch/cluster.py --rl_config=.*serving.address"):
    placement.resolve(MeshConfig(num_devices=1), ServingConfig(placement="nodes", nodes=1))
  place = placement.resolve(
    MeshConfig(num_devices=2), ServingConfig(placement="nodes", nodes=1, address="h:1")
  )
  assert place.trainer_mesh.devices.size == 2  # the trainer trains on all it was given


def test_prefix_hit_rate_per_step_survives_a_server_restart():
  from tmax_jax.loop.rl import prefix_hit_rate

  assert prefix_hit_rate((0, 0), (300, 100)) == 0.75  # (cached, computed) prompt tokens
  assert prefix_hit_rate((300, 100), (300, 100)) == 0.0  # took none
  assert prefix_hit_rate((300, 100), (50, 150)) == 0.25  # restarted: its counters from zero
