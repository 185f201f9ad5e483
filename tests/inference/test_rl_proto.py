"""rl.proto is the source of truth of the `tmax_rl.Rollout` service: the checked-in rl_pb2.py is
protoc's current output for it, and the runtime classes and methods are the ones it declares.

Run as a script to regenerate rl_pb2.py after editing rl.proto:
  PYTHONPATH=. python3 tests/inference/test_rl_proto.py
"""

import pathlib
import re
import subprocess
import sys
import tempfile

from google.protobuf.descriptor import FieldDescriptor

from tmax_jax.inference import rl_proto

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = "tmax_jax/inference/rl.proto"
GENERATED = ROOT / "tmax_jax/inference/rl_pb2.py"
REGENERATE = "PYTHONPATH=. python3 tests/inference/test_rl_proto.py"
# protoc's Python is neither ruff-formatted nor lint-clean (one 1.4k-column line); these lines keep
# it as generated and out of `ruff format --check .` / `ruff check .`.
HEADER = f"# ruff: noqa\n# fmt: off\n# protoc's output for rl.proto; regenerate: {REGENERATE}\n"

_SCALARS = {
  "bool": FieldDescriptor.TYPE_BOOL,
  "bytes": FieldDescriptor.TYPE_BYTES,
  "double": FieldDescriptor.TYPE_DOUBLE,
  "float": FieldDescriptor.TYPE_FLOAT,
  "int32": FieldDescriptor.TYPE_INT32,
  "int64": FieldDescriptor.TYPE_INT64,
  "string": FieldDescriptor.TYPE_STRING,
  "uint64": FieldDescriptor.TYPE_UINT64,
}


def generated_text() -> str:
  """What `python3 -m grpc_tools.protoc` makes of rl.proto now, with HEADER in front."""
  with tempfile.TemporaryDirectory() as out:
    proc = subprocess.run(
      [sys.executable, "-m", "grpc_tools.protoc", "-I", ".", f"--python_out={out}", PROTO],
      cwd=ROOT,
      capture_output=True,
      text=True,
    )
    assert proc.returncode == 0, f"protoc failed on {PROTO}: {proc.stderr.strip()}"
    return HEADER + (pathlib.Path(out) / PROTO).with_name("rl_pb2.py").read_text()


def _declared() -> tuple[dict, dict]:
  """rl.proto read as text: {message: {(field, number, type, repeated)}} and {rpc: (req, resp,
  client_streaming, server_streaming)}. A small reading of the subset rl.proto uses (no nested
  messages, enums, maps or options), independent of protoc, so that it checks protoc's output."""
  text = re.sub(r"//[^\n]*", "", (ROOT / PROTO).read_text())
  messages = {}
  for name, body in re.findall(r"\bmessage\s+(\w+)\s*\{([^{}]*)\}", text):
    fields = re.findall(r"(repeated\s+)?(\w+)\s+(\w+)\s*=\s*(\d+)\s*;", body)
    messages[name] = {(f, int(n), t, bool(rep)) for rep, t, f, n in fields}
  rpcs = re.findall(
    r"\brpc\s+(\w+)\s*\(\s*(stream\s+)?(\w+)\s*\)\s*returns\s*\(\s*(stream\s+)?(\w+)\s*\)", text
  )
  methods = {m: (req, resp, bool(cs), bool(ss)) for m, cs, req, ss, resp in rpcs}
  return messages, methods


def _runtime_fields(cls) -> set:
  out = set()
  for f in cls.DESCRIPTOR.fields:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
      type_name = f.message_type.name
    else:
      type_name = {v: k for k, v in _SCALARS.items()}.get(f.type, f"type {f.type}")
    out.add((f.name, f.number, type_name, f.is_repeated))
  return out


def test_checked_in_generated_code_is_current():
  assert GENERATED.read_text() == generated_text(), (
    f"{GENERATED.name} is stale against rl.proto: regenerate with `{REGENERATE}`"
  )


def test_runtime_messages_have_the_fields_rl_proto_declares():
  messages, _ = _declared()
  assert set(messages) == {
    "GenerateRequest",
    "GenerateResponse",
    "TensorSpec",
    "UpdateWeightsRequest",
    "UpdateWeightsResponse",
    "StatusRequest",
    "StatusResponse",
  }
  assert len(messages["StatusResponse"]) == 19  # the reading found every field, not a prefix
  for name, fields in messages.items():
    cls = getattr(rl_proto, name)
    assert cls.DESCRIPTOR.full_name == f"tmax_rl.{name}"
    assert _runtime_fields(cls) == fields, name


def test_methods_are_the_service_rl_proto_declares():
  _, methods = _declared()
  assert rl_proto.SERVICE == "tmax_rl.Rollout"
  assert methods == rl_proto.METHODS
  assert rl_proto.METHODS["Generate"] == ("GenerateRequest", "GenerateResponse", False, True)
  assert rl_proto.METHODS["UpdateWeights"][2:] == (True, False)
  for method, (req, resp, _, _) in methods.items():
    assert rl_proto.request_class(method) is getattr(rl_proto, req)
    assert rl_proto.response_class(method) is getattr(rl_proto, resp)
  assert rl_proto.method_path("Status") == "/tmax_rl.Rollout/Status"


def test_messages_round_trip_on_the_wire():
  """A nested, repeated message survives serialisation: the classes are usable, not just named."""
  inner = rl_proto.StatusResponse(address="127.0.0.1:1", pages_free=3)
  msg = rl_proto.StatusResponse(live=True, version=7, replica_status=[inner])
  back = rl_proto.response_class("Status").FromString(msg.SerializeToString())
  assert back == msg and back.replica_status[0].pages_free == 3


if __name__ == "__main__":
  GENERATED.write_text(generated_text())
  print(f"wrote {GENERATED.relative_to(ROOT)}")
