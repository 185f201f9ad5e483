"""The pure half of the rehearsal: a shipped job config shrunk to a CPU-sized run of the same shape
(no device work). Every field that differs from the shipped config is a `Change` with its reason;
`check_changes` asserts that nothing else moved, so what is not listed is kept as shipped."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tmax_jax import config as config_show
from tmax_jax import plan
from tmax_jax.agents.worker import request_timeout_s
from tmax_jax.loop import MeshConfig, ModelSpec, RLConfig, ServingConfig, SFTConfig, policy
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.models import registry
from tmax_jax.models.attention import resolve as resolve_attention
from tmax_jax.recipes import MAX_PROMPT
from tmax_jax.rehearse import DEVICES
from tmax_jax.tasks.sources import TaskSource
from tmax_jax.train import PackingConfig

STEPS = 2  # optimizer steps of the first RL / SFT run (the resume runs one more)
# Tiny dims of the same architecture: every head count is a multiple of the largest tensor split
# (the serving replicas' tensor axis), so params split as they do at full size.
TINY_HIDDEN, TINY_MLP, TINY_HEAD_DIM = 32, 128, 16
# Generation caps a random tiny model would spend minutes filling (it never ends a turn by itself);
# the prompt cap (recipe: 2048) is kept, so seq_len = 2048 + the response cap as in the recipe.
TINY_TURN_TOKENS, TINY_RESPONSE_TOKENS = 32, 192

# The 8 fake devices share this host's memory: the [rows, chunk, vocab] fp32 logits of every device
# at once (2.5 GB for 32 rows x 128 x 152k) would not fit beside the rest.
LOGPROB_CHUNK = 32
LOGPROB_WHY = "the fake devices share one host's memory (logits of every device at once)"
SFT_SEQ_LEN = 2048  # oracle trajectories of the rehearsal's procedural tasks are < 1k tokens
RL_PROMPTS, RL_GROUP = 2, 4  # P(a group of 4 coin-flip rewards has no variance) = 1/8
RL_GROUPS_AHEAD, EPISODE_THREADS, SERVER_SLOTS = 2, 8, 16
SFT_TASKS, SFT_BATCH, SFT_FAMILIES = 4, 4, ("line_tool",)
EVAL_TASKS = 2


@dataclasses.dataclass(frozen=True)
class Change:
  """One field the rehearsal changes: shipped value -> rehearsed value, and why."""

  path: str
  shipped: Any
  rehearsed: Any
  why: str


@dataclasses.dataclass
class Rehearsal:
  """A shipped config and its rehearsal: the job, the rehearsed config, what changed and what the
  run keeps that the issue names (family, dtypes, loss, packing, mesh, serving, schedule, caps)."""

  name: str
  job: str
  shipped: Any
  cfg: Any
  changes: list[Change]
  kept: list[tuple[str, Any]]
  notes: list[str]

  def table(self) -> str:
    w = max([len(c.path) for c in self.changes] + [len(k) for k, _ in self.kept] + [10])
    out = [f"rehearsal of {self.name} ({self.job} job)", "shrunk:"]
    out += [f"  {c.path:<{w}}  {_delta(c.shipped, c.rehearsed)}  ({c.why})" for c in self.changes]
    out.append("kept:")
    out += [f"  {k:<{w}}  {v}" for k, v in self.kept]
    return "\n".join(out + [f"note: {n}" for n in self.notes])

  def to_json(self) -> dict:
    return {
      "name": self.name,
      "job": self.job,
      "shrunk": [
        {
          "path": c.path,
          "shipped": _jsonable(c.shipped),
          "rehearsed": _jsonable(c.rehearsed),
          "why": c.why,
        }
        for c in self.changes
      ],
      "kept": {k: _jsonable(v) for k, v in self.kept},
      "notes": list(self.notes),
    }


def _delta(shipped: Any, rehearsed: Any) -> str:
  """`a -> b`; for a dict or a dataclass, only its entries that changed."""
  if dataclasses.is_dataclass(shipped) and type(shipped) is type(rehearsed):
    shipped, rehearsed = dataclasses.asdict(shipped), dataclasses.asdict(rehearsed)
  if isinstance(shipped, dict) and isinstance(rehearsed, dict):
    keys = [k for k in rehearsed if k not in shipped or shipped[k] != rehearsed[k]]
    return ", ".join(f"{k}: {shipped.get(k, '-')!r} -> {rehearsed[k]!r}" for k in keys)
  return f"{shipped!r} -> {rehearsed!r}"


def _jsonable(v: Any) -> Any:
  if dataclasses.is_dataclass(v):
    return {f.name: _jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)}
  if isinstance(v, dict):
    return {str(k): _jsonable(x) for k, x in v.items()}
  if isinstance(v, (list, tuple)):
    return [_jsonable(x) for x in v]
  return v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)


def replace_paths(cfg: Any, values: dict[str, Any]) -> Any:
  """Frozen dataclass `cfg` with the fields at the dotted paths set, each level replaced once (so
  no half-changed config is validated on the way)."""
  here, nested = {}, {}
  for path, value in values.items():
    head, _, rest = path.partition(".")
    if rest:
      nested.setdefault(head, {})[rest] = value
    else:
      here[head] = value
  for head, sub in nested.items():
    here[head] = replace_paths(getattr(cfg, head), sub)
  return dataclasses.replace(cfg, **here)


def get_path(cfg: Any, path: str) -> Any:
  for part in path.split("."):
    cfg = cfg[part] if isinstance(cfg, dict) else getattr(cfg, part)
  return cfg


def apply(cfg: Any, changes: list[tuple[str, Any, str]]) -> tuple[Any, list[Change]]:
  """`cfg` with each (path, value, why) applied; the Changes whose value differs from shipped."""
  done = [Change(p, get_path(cfg, p), v, why) for p, v, why in changes if get_path(cfg, p) != v]
  return replace_paths(cfg, {c.path: c.rehearsed for c in done}), done


def check_changes(shipped: Any, rehearsed: Any, changes: list[Change]) -> None:
  """Every leaf field where `rehearsed` differs from `shipped` is one of `changes` (nothing is
  changed without a reason in the table)."""
  listed = {c.path for c in changes}
  moved = [r.path for r in config_show.rows(rehearsed, shipped) if r.value != r.default]
  unlisted = [p for p in moved if not any(p == c or p.startswith(c + ".") for c in listed)]
  if unlisted:
    raise AssertionError(f"rehearsal changed {unlisted} without listing why")


# --- the mesh rule ----------------------------------------------------------------------------


def _halve_to(sizes: dict[str, int], devices: int, prefer_last: str) -> dict[str, int]:
  """Halves the largest axis (ties: any but `prefer_last` first) until the product fits
  `devices`; an axis > 1 never goes below 2."""
  sizes = dict(sizes)
  while math.prod(sizes.values()) > devices:
    big = [a for a, n in sizes.items() if n > 2]
    if not big:
      raise ValueError(
        f"mesh {sizes} cannot shrink onto {devices} devices keeping every axis > 1 at > 1"
      )
    top = max(sizes[a] for a in big)
    tied = [a for a in big if sizes[a] == top]
    axis = next((a for a in tied if a != prefer_last), tied[0])
    sizes[axis] = sizes[axis] // 2 if sizes[axis] % 2 == 0 else sizes[axis] - 1
  return sizes


def resolved_sizes(mesh: MeshConfig, devices: int) -> dict[str, int]:
  """The mesh's axis sizes with -1 resolved over `devices`."""
  sizes = mesh.sizes()
  fixed = math.prod(n for n in sizes.values() if n != -1)
  return {a: (devices // fixed if n == -1 else n) for a, n in sizes.items()}


def scale_mesh(mesh: MeshConfig, shipped_devices: int, devices: int) -> MeshConfig:
  """The trainer mesh of `shipped_devices` scaled onto `devices`: every axis > 1 stays > 1, and a
  `sequence` axis spanning every shipped trainer device spans every rehearsal one."""
  sizes = resolved_sizes(mesh, mesh.num_devices or shipped_devices)
  if sizes["sequence"] > 1 and sizes["sequence"] == math.prod(sizes.values()) == shipped_devices:
    return MeshConfig(data=1, fsdp=1, sequence=devices, tensor=1)
  scaled = _halve_to(sizes, devices, prefer_last="sequence")
  used = math.prod(scaled.values())
  return MeshConfig(**scaled, num_devices=used if used < devices else 0)


def scale_serving(serving: ServingConfig, devices: int) -> ServingConfig:
  """The server placement on one rehearsal process of `devices`: replicas x tensor halved until
  they fit (each > 1 kept > 1); disaggregated keeps at least one trainer device."""
  room = devices if serving.placement in ("colocated", "nodes") else devices // 2
  sizes = _halve_to({"replicas": serving.replicas, "tensor": serving.tensor}, room, "tensor")
  changes = dict(sizes)
  if serving.placement == "disaggregated":
    changes["devices"] = sizes["replicas"] * sizes["tensor"]
  return dataclasses.replace(serving, **changes)


def _in_process(serving: ServingConfig) -> list:
  """An RL job served on inference nodes (placement 'nodes', a Ray cluster) rehearses with its
  server in process: the same engine programs, on the trainer's devices."""
  if serving.placement != "nodes":
    return []
  why = "one host, no Ray: the inference nodes' server runs in process"
  return [("serving.placement", "colocated", why), ("serving.nodes", 0, why)]


def _local_sandboxes(runner) -> list:
  """A job whose sandboxes run on a Ray cluster's sandbox hosts rehearses with them in process."""
  if not runner.sandbox_hosts:
    return []
  return [("runner.sandbox_hosts", "", "one host, no Ray: the sandboxes run in process")]


def trainer_devices(serving: ServingConfig | None, devices: int, processes: int = 1) -> int:
  if serving is None or serving.placement == "colocated":
    return devices
  return devices - processes * serving.devices


# --- the model --------------------------------------------------------------------------------


def _tiny_heads(cfg, tensor: int) -> dict:
  """Head counts: kv heads a multiple of `tensor` (>= 2), GQA kept as a 2:1 grouping."""
  kv = max(2, tensor)
  heads = 2 * kv if cfg.num_attention_heads > cfg.num_key_value_heads else kv
  return dict(num_attention_heads=heads, num_key_value_heads=kv, head_dim=TINY_HEAD_DIM)


def _tiny_family(fam, kv: int, layers: int):
  """The family sub-config at tiny dims: one period of its layer pattern, linear-attention heads
  and head dims (HF names) shrunk the same way as the attention's."""
  if fam is None:
    return None
  changes = {}
  if getattr(fam, "layer_types", None):
    changes["layer_types"] = tuple(fam.layer_types[:layers])
  if hasattr(fam, "linear_num_key_heads"):
    ratio = fam.linear_num_value_heads // fam.linear_num_key_heads
    changes.update(linear_num_key_heads=kv, linear_num_value_heads=kv * ratio)
  for name in ("linear_key_head_dim", "linear_value_head_dim"):
    if hasattr(fam, name):
      changes[name] = TINY_HEAD_DIM
  return dataclasses.replace(fam, **changes)


def tiny_model(spec: ModelSpec, tensor: int) -> ModelSpec:
  """`spec` at tiny dims of the same family and architecture: one period of a hybrid layer
  pattern (dense: 2 layers), the real vocabulary (the real tokenizer), dtypes and every other
  override (remat, attention impl, axis rules) as shipped."""
  cfg = policy.model_config(spec)
  layers = max(2, plan.layer_period(cfg))
  heads = _tiny_heads(cfg, tensor)
  tiny = dict(
    hidden_size=TINY_HIDDEN,
    intermediate_size=TINY_MLP,
    num_hidden_layers=layers,
    **heads,
  )
  fam = _tiny_family(cfg.family_config, heads["num_key_value_heads"], layers)
  if fam is not None:
    tiny["family_config"] = fam
  return dataclasses.replace(spec, overrides={**dict(spec.overrides), **tiny})


def family_preset(family: str) -> str:
  """The smallest preset of a registered model family whose tokenizer family is `family` (an
  eval config names the family of the model it will be given, not the model)."""
  found = []
  for fam in registry.families():
    for name in fam.presets:
      cfg = registry.preset(name)
      if cfg.model_type in fam.tokenizers and fam.tokenizers[cfg.model_type].family == family:
        found.append((cfg.hidden_size * cfg.num_hidden_layers, name))
  if not found:
    raise ValueError(f"no registered model preset of tokenizer family {family!r}")
  return min(found)[1]


def _model_facts(
  spec: ModelSpec, serving: ServingConfig | None, sequence: int = 1
) -> list[tuple[str, Any]]:
  cfg = policy.model_config(spec)
  kinds = cfg.family_config.layer_types if getattr(cfg.family_config, "layer_types", ()) else ()
  facts = [("model family", f"{spec.preset or spec.checkpoint} (model_type {cfg.model_type})")]
  if kinds:
    facts.append(("layer pattern (one period)", " + ".join(kinds)))
  facts.append(("attention output gate", cfg.attn_output_gate))
  facts.append(("vocabulary (real tokenizer)", cfg.vocab_size))
  served = policy.served_config(cfg, serving).dtypes.param_dtype if serving else None
  facts.append(
    (
      "dtypes (param / compute / head / served)",
      f"{spec.param_dtype} / {spec.compute_dtype} / {spec.head_dtype} / {served or '-'}",
    )
  )
  impl = cfg.attention_impl
  ring = f", as ring attention over sequence {sequence}" if sequence > 1 else ""
  resolved = resolve_attention(impl, platform="cpu")
  facts.append(("attention impl", f"{impl} -> {resolved} on CPU{ring}"))
  return facts


def engine_holds_episode(engine, episode, where: str = "serving.engine") -> str:
  """ "" if a server of shape `engine` takes every request an episode under `episode` can send,
  else what does not fit. Each turn's request carries the whole context so far (first prompt +
  response), so the context reaches the prompt (its cap, or without one the room max_len leaves)
  + max_response_tokens: max_len must hold it and max_prefill_length must take it as a prompt."""
  prompt = episode.max_prompt_tokens or (engine.max_len - episode.max_response_tokens)
  longest = prompt + episode.max_response_tokens
  if longest > engine.max_len:
    return (
      f"{where}.max_len={engine.max_len} < episode.max_prompt_tokens={prompt} + "
      f"episode.max_response_tokens={episode.max_response_tokens}: the last turns of a long "
      "episode would be rejected"
    )
  if longest - 1 > engine.max_prefill_length:
    return (
      f"{where}.max_prefill_length={engine.max_prefill_length} < the longest context an "
      f"episode sends as a prompt ({longest - 1} tokens): an episode past "
      f"{engine.max_prefill_length} tokens would fail (set it to max_len={engine.max_len})"
    )
  return ""


# --- per job ----------------------------------------------------------------------------------


def _scaled_lengths(lengths: tuple[int, ...], old: int, new: int, multiple: int) -> tuple:
  """Row buckets scaled by new / old, each a multiple of `multiple` (rows split over the mesh's
  sequence axis); the longest is `new`."""
  out = [math.ceil(n * new / old / multiple) * multiple for n in lengths[:-1]]
  return tuple(sorted(set(min(n, new) for n in out) | {new}))


def scaled_packing(packing: PackingConfig, old_len: int, new_len: int, sequence: int):
  """The shipped packing at `new_len`: as many longest rows per micro-batch, buckets scaled."""
  if not packing.enabled:
    return packing
  lengths = packing.row_lengths or (old_len,)
  longest_rows = packing.tokens_per_micro_batch // lengths[-1]
  rows = _scaled_lengths(lengths, lengths[-1], new_len, sequence)
  return PackingConfig(tokens_per_micro_batch=longest_rows * new_len, row_lengths=rows)


def _layout(shipped, serving: ServingConfig | None) -> tuple[MeshConfig, list, list[str]]:
  """The scaled trainer mesh, its change rows and notes (multi-process -> one process)."""
  topo = shipped.topology
  n_shipped = trainer_devices(shipped.serving if serving else None, topo.devices, topo.processes)
  n_shipped = n_shipped or math.prod(n for n in shipped.mesh.sizes().values() if n > 0)
  n_trainer = trainer_devices(serving, DEVICES)
  # num_devices: the first 8 of the process's fake devices (rehearse/__init__: HOST_DEVICES)
  mesh = dataclasses.replace(scale_mesh(shipped.mesh, n_shipped, n_trainer), num_devices=n_trainer)
  why = (
    f"scaled from {n_shipped} onto {n_trainer} trainer devices: every axis > 1 kept > 1, a "
    "sequence axis spanning every trainer device still does"
  )
  notes = []
  if topo.processes > 1:
    notes.append(
      f"the shipped topology has {topo.processes} processes ({topo.name}); the rehearsal runs "
      "them as one process of 8 fake CPU devices (the per-host layout: one host's share)"
    )
  rehearsal_topo = dataclasses.replace(
    topo,
    name=f"{DEVICES} fake CPU devices, one process (rehearsal)",
    devices=DEVICES,
    device_memory_gb=0.0,
    processes=1,
  )
  rows = [("mesh", mesh, why), ("topology", rehearsal_topo, "the rehearsal's machine")]
  return mesh, rows, notes


TINY = "tiny dims of the same architecture (one period of the layer pattern), real vocabulary"


def _tiny_overrides(spec: ModelSpec, tensor: int) -> dict:
  return tiny_model(spec, tensor).overrides


def _engine_rows(engine, max_len: int, slots: int) -> list[tuple[str, Any, str]]:
  """The server's shape at the rehearsal's sequence length: `slots` slots of max_len, pages for
  every slot (num_pages 0)."""
  why = "max_len = the rehearsal's sequence; pages for every slot"
  return [
    ("serving.engine.max_concurrent_decodes", slots, "batch"),
    ("serving.engine.num_pages", 0, why),
    ("serving.engine.max_len", max_len, why),
    ("serving.engine.max_prefill_length", min(engine.max_prefill_length, max_len), why),
  ]


def _training_tail(shipped, seq_len: int, mesh, steps: int, out: str) -> list[tuple]:
  """The changes RL and SFT rehearsals share: packing buckets scaled to the shrunk seq_len, the
  logprob chunk, the step count and the output directory."""
  packing = scaled_packing(shipped.train.packing, shipped.seq_len, seq_len, mesh.sequence)
  return [
    ("train.packing", packing, "row buckets scaled to seq_len"),
    ("train.logprob_chunk_size", LOGPROB_CHUNK, LOGPROB_WHY),
    ("steps", steps, "steps"),
    ("output_dir", out, "the rehearsal's directory"),
  ]


def shrink_rl(
  name: str, shipped: RLConfig, tasks_dir: str, out: str, steps: int = STEPS
) -> Rehearsal:
  """The RL rehearsal: 2 steps of 2 prompts x 4 samples on the random-verifier tasks."""
  serving = scale_serving(shipped.serving, DEVICES)
  mesh, layout, notes = _layout(shipped, serving)
  prompt_room = shipped.seq_len - shipped.episode.max_response_tokens
  seq_len = prompt_room + TINY_RESPONSE_TOKENS
  rows = RL_PROMPTS * RL_GROUP
  tokens = f"a random tiny model never ends a turn itself: {TINY_TURN_TOKENS} / "
  tokens += f"{TINY_RESPONSE_TOKENS} tokens instead of minutes of generation"
  changes = [
    ("model.overrides", _tiny_overrides(shipped.model, max(serving.tensor, mesh.tensor)), TINY),
    *layout,
    ("serving.replicas", serving.replicas, "scaled onto one 8-device host"),
    ("serving.tensor", serving.tensor, "scaled onto one 8-device host"),
    ("serving.devices", serving.devices, "scaled onto one 8-device host"),
    *_in_process(shipped.serving),
    *_local_sandboxes(shipped.runner),
    *_engine_rows(shipped.serving.engine, seq_len, SERVER_SLOTS),
    ("tasks", TaskSource(source=tasks_dir, num_eval=1), "random-verifier rehearsal tasks"),
    ("rollout.prompts_per_batch", RL_PROMPTS, "batch"),
    ("rollout.group_size", RL_GROUP, "batch"),
    ("rollout.max_groups_ahead", RL_GROUPS_AHEAD, "batch"),
    ("train.global_batch", rows, "prompts x samples"),
    ("worker.max_parallel_episodes", EPISODE_THREADS, "2 cores"),
    ("episode.turn_max_tokens", TINY_TURN_TOKENS, tokens),
    ("episode.max_response_tokens", TINY_RESPONSE_TOKENS, tokens),
    ("seq_len", seq_len, "prompt cap + the shrunk response cap, as shipped"),
    *_training_tail(shipped, seq_len, mesh, steps, out),
  ]
  if not shipped.train.packing.enabled:
    per = shipped.rollout.prompts_per_batch * shipped.rollout.group_size
    per //= shipped.train.micro_batches
    shards = mesh.data * mesh.fsdp
    per = per if rows % per == 0 and per % shards == 0 else shards
    changes.append(("train.micro_batches", rows // per, f"{per} rows per micro-batch"))
  cfg, done = apply(shipped, changes)
  notes.append(
    "tasks: coin-flip verifiers (reward 1 with probability 1/2 from /dev/urandom), so groups of "
    "a random policy have reward variance with the zero-std filter kept on"
  )
  return Rehearsal(name, "rl", shipped, cfg, done, _rl_kept(cfg), notes)


def _rl_kept(cfg: RLConfig) -> list[tuple[str, Any]]:
  loss, ep, ro = cfg.train.loss, cfg.episode, cfg.rollout
  return [
    *_model_facts(cfg.model, cfg.serving, cfg.mesh.sequence),
    ("loss", f"{loss.policy_loss} {loss.hyper}, kl_beta {loss.kl_beta}, {loss.estimator}"),
    *_train_facts(cfg.train, cfg.mesh, cfg.seq_len),
    (
      "serving",
      f"{cfg.serving.placement}, {cfg.serving.replicas} replicas x tensor {cfg.serving.tensor}",
    ),
    (
      "rollout",
      f"async {ro.async_steps}, zero-std filter {ro.zero_std_filter}, active sampling "
      f"{ro.active_sampling}, temperature {cfg.worker.temperature}",
    ),
    *_episode_facts(ep, cfg.runner),
  ]


def _train_facts(train, mesh: MeshConfig, seq_len: int) -> list[tuple[str, Any]]:
  opt, pack = train.optimizer, train.packing
  sizes = {a: n for a, n in mesh.sizes().items() if n != 1}
  spans = mesh.sequence > 1 and mesh.sequence == math.prod(mesh.sizes().values())
  packing = (
    f"packed: {pack.tokens_per_micro_batch} token slots, rows {pack.row_lengths}"
    if pack.enabled
    else f"fixed rows of {seq_len}, {train.micro_batches} micro-batches"
  )
  return [
    (
      "schedule",
      f"{opt.schedule}, lr {opt.learning_rate}, warmup ratio {opt.warmup_ratio}, wd "
      f"{opt.weight_decay}, grad norm {opt.max_grad_norm}",
    ),
    ("packing", packing),
    ("trainer mesh", f"{sizes}" + ("; sequence spans every trainer device" if spans else "")),
    ("checkpoints", f"every {train.checkpoint.save_every}, keep {train.checkpoint.keep_last}"),
  ]


def _episode_facts(ep, runner) -> list[tuple[str, Any]]:
  """The harness and the caps; time limits as runner.agent_timeout_s / verifier_timeout_s apply."""
  times = f" x {runner.timeout_multiplier}" if runner.timeout_multiplier != 1.0 else ""
  wall = f"{ep.wall_time_s} s" if ep.wall_time_s else "the task's"
  least = runner.min_verifier_timeout_s
  tests = f"max(task{times}, {least} s)" if least else f"task{times}"
  return [
    ("harness", f"{ep.harness} ({ep.family} tool calls)"),
    (
      "caps",
      f"prompt {ep.max_prompt_tokens or 'none'}, tool calls {ep.max_tool_calls}, turns "
      f"{ep.max_turns}, command {ep.command_timeout_s} s, wall {wall}{times}",
    ),
    ("verifier timeout", f"{tests}; sandbox {runner.memory_mb} MB"),
  ]


def shrink_sft(name: str, shipped: SFTConfig, out: str, steps: int = STEPS) -> Rehearsal:
  """The SFT rehearsal: oracle trajectories of a few procedural tasks (the job's own path)."""
  mesh, layout, notes = _layout(shipped, None)
  changes = [
    ("model.overrides", _tiny_overrides(shipped.model, mesh.tensor), TINY),
    *layout,
    ("trajectories", "", "oracle trajectories (the job's own path without a JSONL)"),
    (
      "tasks",
      TaskSource(families=SFT_FAMILIES, num_train=SFT_TASKS, num_eval=0),
      "a few procedural tasks",
    ),
    ("train.global_batch", SFT_BATCH, "batch"),
    ("seq_len", SFT_SEQ_LEN, "oracle trajectories of the procedural tasks are < 1k tokens"),
    *_training_tail(shipped, SFT_SEQ_LEN, mesh, steps, out),
  ]
  cfg, done = apply(shipped, changes)
  kept = [
    *_model_facts(cfg.model, None, cfg.mesh.sequence),
    *_train_facts(cfg.train, cfg.mesh, cfg.seq_len),
  ]
  kept.append(("loss", cfg.train.loss.policy_loss))
  return Rehearsal(name, "sft", shipped, cfg, done, kept, notes)


def shrink_eval(name: str, shipped: EvalConfig, tasks_dir: str, out: str) -> Rehearsal:
  """The eval rehearsal: the config's policy, harness and runs_per_task on a few tasks; a served
  policy is a tiny model of the config's family served in process (address '')."""
  changes = [("tasks_dir", tasks_dir, f"{EVAL_TASKS} procedural tasks"), ("output_dir", out, "")]
  notes = []
  if shipped.policy == "server":
    family = shipped.episode.family
    spec = ModelSpec(
      preset=family_preset(family),
      param_dtype=shipped.model.param_dtype,
      compute_dtype=shipped.model.compute_dtype,
      head_dtype=shipped.model.head_dtype,
    )
    max_len = (shipped.episode.max_prompt_tokens or MAX_PROMPT) + TINY_RESPONSE_TOKENS
    changes += [
      ("address", "", "a tiny model of the config's family served in process"),
      ("model", tiny_model(spec, shipped.serving.tensor), f"a tiny {family} model"),
      *_engine_rows(shipped.serving.engine, max_len, shipped.serving.engine.max_concurrent_decodes),
      ("episode.turn_max_tokens", TINY_TURN_TOKENS, "a random tiny model never ends a turn"),
      ("episode.max_response_tokens", TINY_RESPONSE_TOKENS, "as above"),
    ]
    notes.append(f"served: a random tiny {family} model; its pass rate is not the point")
  cfg, done = apply(shipped, changes)
  kept = [
    ("policy", cfg.policy),
    ("runs per task", cfg.runs_per_task),
    ("temperature", cfg.worker.temperature),
    ("request timeout", f"{request_timeout_s(cfg.worker, cfg.episode)} s"),
    *_episode_facts(cfg.episode, cfg.runner),
  ]
  if cfg.policy == "server":
    kept = _model_facts(cfg.model, cfg.serving) + kept
  return Rehearsal(name, "eval", shipped, cfg, done, kept, notes)
