"""The `tmax_rl.Rollout` gRPC service that sits next to JetStream's `Orchestrator` on one server.

JetStream 0.2.2's DecodeResponse carries text and token ids only, and its proto has no weight
update call, so RL gets its own small service. No protoc/grpc_tools is needed: the messages are
built from a FileDescriptorProto below, equivalent to this .proto:

  syntax = "proto3";
  package tmax_rl;
  message GenerateRequest {
    repeated int32 prompt_token_ids = 1;  // token-id prompt (multi-turn: the whole conversation)
    int32 max_tokens = 2;
    float temperature = 3;                // 0 = greedy
    float top_p = 4;                      // 0 is read as 1 (off)
    int32 top_k = 5;                      // 0 = off
    repeated int32 stop_token_ids = 6;    // added to the server's default stop ids
    uint64 seed = 7;
    string request_id = 8;
    int32 top_logprobs = 9;               // K: also return each token's top-K (<= server max_topk)
    string session_id = 10;               // a router's affinity key (router.py); servers ignore it
  }
  message GenerateResponse {              // the steps delivered since the last one (streamed)
    repeated int32 token_ids = 1;
    repeated float logprobs = 2;          // behaviour logprob of each token (see sampling.py)
    repeated int64 policy_versions = 3;   // weight version that produced each token
    string finish_reason = 4;             // "" while streaming; "stop" | "length" on the last one
    string instance_id = 5;               // on the first response: the serving process (see Status)
    repeated int32 topk_ids = 6;          // K per token (most likely first), when asked for
    repeated float topk_logprobs = 7;     // their logprobs under the same distribution as logprobs
  }
  message TensorSpec { string name = 1; repeated int64 shape = 2; string dtype = 3; }
  message UpdateWeightsRequest {          // client-streamed; protocol in updates.py
    int64 version = 1;
    string path = 2;                      // or: a checkpoint on the server's filesystem
    repeated TensorSpec manifest = 3;     // first message of a tensor stream: all tensors, in order
    int32 tensor = 4;                     // manifest index of this chunk's tensor
    int64 offset = 5;                     // byte offset of `data` in that tensor
    bytes data = 6;
    string crc32 = 7;                     // on a tensor's first chunk: CRC-32 of all its bytes
    bool replace = 8;                     // first message: may replace a newer version (below)
  }
  message UpdateWeightsResponse {
    int64 version = 1; double seconds = 2; int64 bytes = 3; string instance_id = 4;
  }
  message StatusRequest {}
  message StatusResponse {
    bool live = 1; int64 version = 2; int32 max_concurrent_decodes = 3; int32 max_len = 4;
    string model_type = 5; int32 active_requests = 6;  // slots decoding (all replicas)
    string instance_id = 7;  // random per server start: a restarted server has a new one
    int32 replicas = 8; int32 page_size = 9; int32 max_topk = 10;
    int32 pages_total = 11; int32 pages_used = 12;      // KV pages (all replicas); used: requests
    int32 pages_free = 13; int32 pages_cached = 14;     // cached: held only by the prefix cache
    int32 waiting_requests = 15;                        // queued for slots/pages, or prefilling
    int64 prefill_tokens = 16; int64 cached_prompt_tokens = 17;  // computed / reused from cache
    repeated StatusResponse replica_status = 18;  // a router's: each replica's last Status
    string address = 19;                          // on replica_status entries: the replica's
  }
  service Rollout {
    rpc Generate(GenerateRequest) returns (stream GenerateResponse);
    rpc UpdateWeights(stream UpdateWeightsRequest) returns (UpdateWeightsResponse);
    rpc Status(StatusRequest) returns (StatusResponse);
  }
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tmax_rl"
SERVICE = f"{PACKAGE}.Rollout"
_F = descriptor_pb2.FieldDescriptorProto

_MESSAGES = {
  "GenerateRequest": [
    ("prompt_token_ids", _F.TYPE_INT32, True),
    ("max_tokens", _F.TYPE_INT32, False),
    ("temperature", _F.TYPE_FLOAT, False),
    ("top_p", _F.TYPE_FLOAT, False),
    ("top_k", _F.TYPE_INT32, False),
    ("stop_token_ids", _F.TYPE_INT32, True),
    ("seed", _F.TYPE_UINT64, False),
    ("request_id", _F.TYPE_STRING, False),
    ("top_logprobs", _F.TYPE_INT32, False),
    ("session_id", _F.TYPE_STRING, False),
  ],
  "GenerateResponse": [
    ("token_ids", _F.TYPE_INT32, True),
    ("logprobs", _F.TYPE_FLOAT, True),
    ("policy_versions", _F.TYPE_INT64, True),
    ("finish_reason", _F.TYPE_STRING, False),
    ("instance_id", _F.TYPE_STRING, False),
    ("topk_ids", _F.TYPE_INT32, True),
    ("topk_logprobs", _F.TYPE_FLOAT, True),
  ],
  "TensorSpec": [
    ("name", _F.TYPE_STRING, False),
    ("shape", _F.TYPE_INT64, True),
    ("dtype", _F.TYPE_STRING, False),
  ],
  "UpdateWeightsRequest": [
    ("version", _F.TYPE_INT64, False),
    ("path", _F.TYPE_STRING, False),
    ("manifest", "TensorSpec", True),
    ("tensor", _F.TYPE_INT32, False),
    ("offset", _F.TYPE_INT64, False),
    ("data", _F.TYPE_BYTES, False),
    ("crc32", _F.TYPE_STRING, False),
    ("replace", _F.TYPE_BOOL, False),
  ],
  "UpdateWeightsResponse": [
    ("version", _F.TYPE_INT64, False),
    ("seconds", _F.TYPE_DOUBLE, False),
    ("bytes", _F.TYPE_INT64, False),
    ("instance_id", _F.TYPE_STRING, False),
  ],
  "StatusRequest": [],
  "StatusResponse": [
    ("live", _F.TYPE_BOOL, False),
    ("version", _F.TYPE_INT64, False),
    ("max_concurrent_decodes", _F.TYPE_INT32, False),
    ("max_len", _F.TYPE_INT32, False),
    ("model_type", _F.TYPE_STRING, False),
    ("active_requests", _F.TYPE_INT32, False),
    ("instance_id", _F.TYPE_STRING, False),
    ("replicas", _F.TYPE_INT32, False),
    ("page_size", _F.TYPE_INT32, False),
    ("max_topk", _F.TYPE_INT32, False),
    ("pages_total", _F.TYPE_INT32, False),
    ("pages_used", _F.TYPE_INT32, False),
    ("pages_free", _F.TYPE_INT32, False),
    ("pages_cached", _F.TYPE_INT32, False),
    ("waiting_requests", _F.TYPE_INT32, False),
    ("prefill_tokens", _F.TYPE_INT64, False),
    ("cached_prompt_tokens", _F.TYPE_INT64, False),
    ("replica_status", "StatusResponse", True),
    ("address", _F.TYPE_STRING, False),
  ],
}

# method -> (request, response, client_streaming, server_streaming)
METHODS = {
  "Generate": ("GenerateRequest", "GenerateResponse", False, True),
  "UpdateWeights": ("UpdateWeightsRequest", "UpdateWeightsResponse", True, False),
  "Status": ("StatusRequest", "StatusResponse", False, False),
}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
  fd = descriptor_pb2.FileDescriptorProto(
    name="tmax_rl/rollout.proto", package=PACKAGE, syntax="proto3"
  )
  for name, fields in _MESSAGES.items():
    msg = fd.message_type.add(name=name)
    for number, (fname, ftype, repeated) in enumerate(fields, start=1):
      label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
      if isinstance(ftype, str):  # a message type defined above
        msg.field.add(
          name=fname,
          number=number,
          type=_F.TYPE_MESSAGE,
          label=label,
          type_name=f".{PACKAGE}.{ftype}",
        )
      else:
        msg.field.add(name=fname, number=number, type=ftype, label=label)
  svc = fd.service.add(name="Rollout")
  for name, (req, resp, cstream, sstream) in METHODS.items():
    svc.method.add(
      name=name,
      input_type=f".{PACKAGE}.{req}",
      output_type=f".{PACKAGE}.{resp}",
      client_streaming=cstream,
      server_streaming=sstream,
    )
  return fd


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
_CLASSES = {
  name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))
  for name in _MESSAGES
}

GenerateRequest = _CLASSES["GenerateRequest"]
GenerateResponse = _CLASSES["GenerateResponse"]
TensorSpec = _CLASSES["TensorSpec"]
UpdateWeightsRequest = _CLASSES["UpdateWeightsRequest"]
UpdateWeightsResponse = _CLASSES["UpdateWeightsResponse"]
StatusRequest = _CLASSES["StatusRequest"]
StatusResponse = _CLASSES["StatusResponse"]


def method_path(method: str) -> str:
  return f"/{SERVICE}/{method}"


def request_class(method: str):
  return _CLASSES[METHODS[method][0]]


def response_class(method: str):
  return _CLASSES[METHODS[method][1]]
