"""Device placement of the jobs (8 fake CPU devices): trainer / server meshes, config errors that
name the fields, and SFT on a 4-device mesh equal to the single-device run."""

import jax
import numpy as np
import pytest

from tmax_jax.loop import placement
from tmax_jax.loop.config import MeshConfig, ModelSpec, ServingConfig, SFTConfig
from tmax_jax.loop.sft import run_sft
from tmax_jax.train.config import LossConfig, OptimizerConfig, TrainConfig

TINY = dict(
  vocab_size=256,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
  tie_word_embeddings=False,
)


@pytest.fixture(autouse=True)
def _eight_devices():
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")


# Adam normalises each element's step to ~lr whatever the gradient's size, so the fp32
# reduction-order noise of a sharded sum (~1e-6 relative) reaches the params as ~lr x that noise
# for elements with |g| near eps, and as a flipped full step at eps 1e-8 for |g| ~ 1e-8. A small
# lr and eps 1e-5 keep every update a smooth function of the gradient, so params compare at 1e-5.
PARITY_ADAM = OptimizerConfig(learning_rate=1e-4, eps=1e-5, total_steps=2)


def _ids(mesh) -> list[int]:
  return [d.id for d in np.asarray(mesh.devices).flat]


def test_disaggregated_splits_the_devices():
  p = placement.resolve(
    MeshConfig(fsdp=2, tensor=2),
    ServingConfig(placement="disaggregated", devices=4, replicas=2, tensor=2),
  )
  assert _ids(p.trainer_mesh) == [0, 1, 2, 3] and _ids(p.server_mesh) == [4, 5, 6, 7]
  assert dict(p.trainer_mesh.shape) == {"data": 1, "fsdp": 2, "sequence": 1, "tensor": 2}
  assert dict(p.server_mesh.shape) == {"replica": 2, "tensor": 2} and not p.colocated


def test_colocated_shares_the_devices():
  p = placement.resolve(MeshConfig(data=2, fsdp=2, tensor=2), ServingConfig(tensor=8))
  assert _ids(p.trainer_mesh) == _ids(p.server_mesh) == list(range(8)) and p.colocated
  # the default serving mesh is one device (of the trainer's)
  assert _ids(placement.resolve(MeshConfig(), ServingConfig()).server_mesh) == [0]


def test_config_errors_name_the_fields():
  with pytest.raises(
    ValueError,
    match=r"^mesh \(data=2 x fsdp=2 x sequence=1 x tensor=2\) does "
    r"not fit the trainer under placement 'disaggregated'.*4 device",
  ):
    placement.resolve(
      MeshConfig(data=2, fsdp=2, tensor=2),
      ServingConfig(placement="disaggregated", devices=4, tensor=4),
    )
  with pytest.raises(
    ValueError,
    match=r"serving.replicas x serving.tensor = 3 must equal "
    r"serving.devices=4",
  ):
    placement.resolve(MeshConfig(), ServingConfig(placement="disaggregated", devices=4, tensor=3))
  with pytest.raises(
    ValueError,
    match=r"serving.replicas x serving.tensor = 16 device\(s\), "
    r"but each process has 8",
  ):
    placement.resolve(MeshConfig(), ServingConfig(replicas=2, tensor=8))
  with pytest.raises(ValueError, match=r"serving.devices=8 leaves no training device"):
    placement.resolve(MeshConfig(), ServingConfig(placement="disaggregated", devices=8))
  with pytest.raises(ValueError, match=r"serving.devices=0: placement 'disaggregated' needs"):
    ServingConfig(placement="disaggregated")
  with pytest.raises(ValueError, match=r"serving.placement='split'"):
    ServingConfig(placement="split")
  with pytest.raises(ValueError, match=r"mesh.num_devices=9, but the job .* has only 8 device"):
    placement.trainer_only(MeshConfig(num_devices=9))
  with pytest.raises(
    ValueError,
    match=r"train.global_batch = 4 rows in train.micro_batches=1 "
    r"micro-batches do not split over mesh.data x mesh.fsdp = 8",
  ):
    placement.check_batch(placement.trainer_only(MeshConfig()), 4, 1, "train.global_batch")
  with pytest.raises(ValueError, match=r"each must be >= 1, or -1"):
    MeshConfig(fsdp=-1, tensor=-1)


def _records(n: int) -> list[dict]:
  rng = np.random.default_rng(0)
  out = []
  for _ in range(n):
    length = int(rng.integers(8, 24))
    mask = (np.arange(length) >= 4).astype(np.float32)
    out.append({"tokens": rng.integers(0, 256, length).tolist(), "loss_mask": mask.tolist()})
  return out


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
def test_sft_on_a_4_device_mesh_equals_one_device(tmp_path):
  records = _records(16)
  out = {}
  for name, mesh in (
    ("one", MeshConfig(num_devices=1)),
    ("mesh", MeshConfig(fsdp=2, tensor=2, num_devices=4)),
  ):
    cfg = SFTConfig(
      model=ModelSpec(preset="qwen3-0.6b", overrides=TINY, seed=1),
      train=TrainConfig(
        optimizer=PARITY_ADAM,
        loss=LossConfig(policy_loss="sft"),
        global_batch=8,
        micro_batches=2,
        logprob_chunk_size=32,
      ),
      mesh=mesh,
      steps=2,
      seq_len=32,
      output_dir=str(tmp_path / name),
    )
    res = run_sft(cfg, records=records)
    out[name] = res
  sharded = out["mesh"].params["model"]["layers"]["self_attn"]["q_proj"]["kernel"]
  assert len(sharded.sharding.device_set) == 4 and sharded.sharding.spec[1] == "fsdp"
  for a, b in zip(out["one"].metrics, out["mesh"].metrics, strict=True):
    np.testing.assert_allclose(b["loss"], a["loss"], rtol=1e-5)
  flat_a = jax.tree_util.tree_leaves_with_path(jax.device_get(out["one"].params))
  for (path, a), b in zip(flat_a, jax.tree.leaves(jax.device_get(out["mesh"].params)), strict=True):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path))
  assert out["one"].metrics[0]["loss"] > 1.0 and out["one"].metrics[0]["grad_norm"] > 0
