"""A data x FSDP sharded step on 4 fake CPU devices equals the single-device step, for a fixed-shape
batch and for packed micro-batches (whose rows split evenly over the 4 batch shards)."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
  import jax, jax.numpy as jnp, numpy as np
  from tests.train.conftest import random_trajectories
  from tmax_jax import sharding
  from tmax_jax.models import registry
  from tmax_jax.train import batch as batch_lib, step as step_lib
  from tests.train import toy
  from tmax_jax.train.config import OptimizerConfig, PackingConfig, TrainConfig
  assert jax.device_count() == 4
  mcfg = toy.model_config(toy.ToyConfig())
  model = registry.build_model(mcfg)
  cfg = TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-4), micro_batches=2,
                    logprob_chunk_size=8)
  batch = batch_lib.pack(random_trajectories(0, 16, 12), 24, num_rows=8)
  packed_cfg = cfg.replace(packing=PackingConfig(tokens_per_micro_batch=96, row_lengths=(12, 24)))
  trajs = random_trajectories(0, 16, 12)
  out = {}
  mesh4 = sharding.make_mesh(data=2, fsdp=2)
  for name, mesh, tcfg in (("single", None, cfg), ("sharded", mesh4, cfg),
                           ("packed_single", None, packed_cfg), ("packed_sharded", mesh4, packed_cfg)):
    shard = None if mesh is None else registry.param_shardings(mcfg, mesh)
    params = registry.init_params(mcfg, jax.random.key(1), shard)
    trainer = step_lib.Trainer(model, mcfg, tcfg, mesh)
    state = trainer.init_state(params)
    data = batch if tcfg is cfg else trainer.make_batch(trajs, 24)
    if tcfg is packed_cfg and mesh is not None:
      assert all(mb.shape[0] % 4 == 0 for mb in data.micro_batches), data
    for _ in range(2):
      state, metrics = trainer.step(state, data)
    if mesh is not None:  # FSDP really shards: some param is split over devices
      specs = [x.sharding.spec for x in jax.tree.leaves(state.params)]
      assert any(any(a is not None for a in s) for s in specs), specs
      assert all(x.sharding == y for x, y in
                 zip(jax.tree.leaves(state.params), jax.tree.leaves(shard)))
    out[name] = (jax.device_get(state.params), metrics)
  for one, many in (("single", "sharded"), ("packed_single", "packed_sharded")):
    for a, b in zip(jax.tree.leaves(out[one][0]), jax.tree.leaves(out[many][0])):
      np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[many][1]["loss"], out[one][1]["loss"], rtol=1e-5)
  print("SHARDED_OK")
""")  # noqa: E501 (embedded script, kept verbatim)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_data_fsdp_sharded_step_equals_single_device():
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS="--xla_force_host_platform_device_count=4",
  )
  r = subprocess.run(
    [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=800
  )
  assert r.returncode == 0 and "SHARDED_OK" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]
