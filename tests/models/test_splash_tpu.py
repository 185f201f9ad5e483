"""Splash attention is the Mosaic kernel under a TPU-topology compile and the interpreter on CPU.

The TPU half compiles (XLA:TPU through libtpu, no TPU needed) in the compiler venv of
tmax_jax.aot.toolchain, in a subprocess, for compile-only v5p:2x2x1 devices: attention_impl "auto"
must pick splash from the mesh's platform (jax.default_backend() says "cpu" there) and the kernel
must sit inside shard_map, or XLA refuses it ("Mosaic kernels cannot be automatically
partitioned"). The compiled HLO then holds a `tpu_custom_call`. The CPU half lowers the same
splash on the fake CPU devices: there it is the Pallas interpreter (plain HLO, no custom call), and
"auto" resolves to blockwise.
"""

import json
import os
import subprocess
import sys

import pytest

# the compiler venv's module (tmax_jax/aot, landing alongside this test)
toolchain = pytest.importorskip("tmax_jax.aot.toolchain")

# The script is the same for both platforms: it prints one JSON line of custom-call counts per
# compiled program. Shapes are small (T = 256, H = 128: the kernel's lane width) so each compile
# takes about a second.
SCRIPT = r"""
import json, sys
import jax, jax.numpy as jnp
from tmax_jax import sharding
from tmax_jax.models import ModelConfig, attention, build_model, registry

platform, wanted = sys.argv[1], sys.argv[2].split(",")
if platform == "tpu":
  from jax.experimental import topologies
  devices = topologies.get_topology_desc(platform="tpu", topology_name="v5p:2x2x1").devices
else:
  devices = jax.devices()[:4]
mesh = sharding.make_mesh(data=2, fsdp=1, tensor=2, devices=devices)
cfg = ModelConfig(
  vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
  num_attention_heads=4, num_key_value_heads=2, head_dim=128, tie_word_embeddings=False,
).with_dtypes(param_dtype="bfloat16", compute_dtype="bfloat16")
rules = cfg.logical_axis_rules
b, t = 4, 256


def sds(shape, dtype, axes):
  spec = sharding.activation_sharding(mesh, rules, axes)
  return jax.ShapeDtypeStruct(shape, dtype, sharding=spec)


q = sds((b, t, 4, 128), jnp.bfloat16, ("batch", "length", "heads", "head_dim"))
kv = sds((b, t, 2, 128), jnp.bfloat16, ("batch", "length", "kv_heads", "head_dim"))
rows = sds((b, t), jnp.int32, ("batch", "length"))


def attend(impl):
  def fn(q, k, v, pos, seg):
    return attention.self_attention(q, k, v, pos, seg, impl=impl)
  return fn


def grad_of(fn):
  return jax.grad(lambda q, k, v, pos, seg: jnp.sum(fn(q, k, v, pos, seg).astype(jnp.float32)),
                  (0, 1, 2))


def model_forward(params, tokens, pos, seg):
  hidden, _ = build_model(cfg).apply({"params": params}, tokens, pos, seg)
  return hidden


params = jax.tree.map(
  lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
  registry.abstract_params(cfg), registry.param_shardings(cfg, mesh),
)
programs = {
  "auto": (attend("auto"), (q, kv, kv, rows, rows)),
  "auto_grad": (grad_of(attend("auto")), (q, kv, kv, rows, rows)),
  "splash": (attend("splash"), (q, kv, kv, rows, rows)),
  "model": (model_forward, (params, rows, rows, rows)),
}
report = {"default_backend": jax.default_backend()}
with sharding.use_mesh(mesh, rules):
  report["platform"] = sharding.platform()
  report["auto_resolves_to"] = attention.resolve("auto", jnp.bfloat16)
  for name in wanted:
    fn, args = programs[name]
    text = jax.jit(fn).lower(*args).compile().as_text()
    report[name] = text.count("tpu_custom_call")
print(json.dumps(report))
"""


def _compile_report(python: str, platform: str, programs: str, env: dict) -> dict:
  proc = subprocess.run(
    [python, "-c", SCRIPT, platform, programs],
    capture_output=True,
    text=True,
    env=env,
    timeout=300,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_splash_is_the_mosaic_kernel_under_a_tpu_topology_compile():
  reason = toolchain.unavailable("tpu")
  if reason:
    pytest.skip(reason)
  report = _compile_report(
    str(toolchain.python()), "tpu", "auto,auto_grad,splash,model", toolchain.environ()
  )
  assert report["default_backend"] == "cpu"  # the host; the kernel choice follows the mesh
  assert report["platform"] == "tpu"
  assert report["auto_resolves_to"] == "splash"
  assert report["auto"] >= 1, report  # the forward kernel
  assert report["auto_grad"] >= 2, report  # forward (residuals) + the backward kernels
  assert report["splash"] >= 1, report
  assert report["model"] >= 1, report  # a whole decoder layer, attention_impl left at "auto"


def test_splash_is_the_interpreter_on_a_cpu_mesh():
  report = _compile_report(sys.executable, "cpu", "splash", dict(os.environ))
  assert report["platform"] == "cpu"
  assert report["auto_resolves_to"] == "blockwise"  # "auto" never reaches splash on CPU
  assert report["splash"] == 0, report  # forced splash: the Pallas interpreter, plain HLO
