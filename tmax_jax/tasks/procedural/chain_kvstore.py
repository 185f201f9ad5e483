"""kv_log chain (software_engineering): a log-structured key-value store grown in steps.

  kv_store   implement the stubbed Store methods (append-only JSON-lines log, replay on open)
  compact    add Store.compact() (one sorted set line per live key, atomic replace) and compact
             the application's long log data/app.log with it
  expiry     (after compact) keys with a time to live: set(key, value, ttl=...), an injectable
             clock, expired keys read as missing and are dropped by compact
  batch      (branch after kv_store) Store.batch(): a context manager that writes its operations
             as ONE log line, applied atomically on replay; a torn last line is ignored

Every generation's check drives /workspace/kv/store.py through its own fresh log files, so the
earlier generations' checks keep holding as the class grows (set(key, value) keeps working, the
log format only gains operations). The environment ships only stubs (`raise NotImplementedError`):
the oracle writes every body itself, which is what the static audit expects of a clean task.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.chains import STEP_MARK, ChainFamily, Extension
from tmax_jax.tasks.procedural.core import Family, TaskSpec

_HEADER = '''"""An append-only key-value store: every change is one JSON line in the log file."""

import json
import os


class Store:
  def __init__(self, path):
    self.path = path
    self.data = {}
    if os.path.exists(path):
      self._replay()
'''

STUB = (
  _HEADER
  + '''
  def _replay(self):
    """Rebuilds self.data from the log, line by line."""
    raise NotImplementedError

  def get(self, key, default=None):
    raise NotImplementedError

  def set(self, key, value):
    raise NotImplementedError

  def delete(self, key):
    raise NotImplementedError
'''
)

IMPL = (
  _HEADER
  + '''
  def _replay(self):
    """Rebuilds self.data from the log, line by line."""
    with open(self.path) as f:
      for line in f:
        if line.strip():
          self._apply(json.loads(line))

  def _apply(self, rec):
    if rec["op"] == "set":
      self.data[rec["key"]] = rec["value"]
    else:
      self.data.pop(rec["key"], None)

  def _append(self, rec):
    with open(self.path, "a") as f:
      f.write(json.dumps(rec) + "\\n")
      f.flush()
      os.fsync(f.fileno())
    self._apply(rec)

  def get(self, key, default=None):
    return self.data.get(key, default)

  def set(self, key, value):
    self._append({"op": "set", "key": key, "value": value})

  def delete(self, key):
    if key not in self.data:
      raise KeyError(key)
    self._append({"op": "del", "key": key})
'''
)

_APPEND = """    with open(self.path, "a") as f:
      f.write(json.dumps(rec) + "\\n")
      f.flush()
      os.fsync(f.fileno())
    self._apply(rec)"""
SNAPSHOT_APPEND = """    self._apply(rec)
    with open(self.path, "w") as f:
      f.write(json.dumps(self.data) + "\\n")"""
assert _APPEND in IMPL

CHECK_COMMON = '''
import tempfile


def load():
  return load_module("/workspace/kv/store.py")


def run_ops(store, ops):
  """Applies DATA ops; returns the expected dict (None = missing key)."""
  for op in ops:
    if op[0] == "set":
      store.set(op[1], op[2])
    elif op[0] == "del":
      try:
        store.delete(op[1])
      except KeyError:
        if op[2]:
          continue
        fail(f"delete({op[1]!r}) raised KeyError but the key exists")
      else:
        if op[2]:
          fail(f"delete({op[1]!r}) of a missing key did not raise KeyError")


def records(path):
  out = []
  for no, line in enumerate(read(path).splitlines(), 1):
    try:
      out.append(json.loads(line))
    except ValueError:
      fail(f"{path} line {no} is not JSON: {line[:80]!r}")
  return out
'''

STORE_CHECK = (
  CHECK_COMMON
  + """
mod = load()
path = os.path.join(tempfile.mkdtemp(), "t.log")
store = mod.Store(path)
try:
  run_ops(store, DATA["ops"])
except NotImplementedError:
  fail("Store still raises NotImplementedError")
for key, value in DATA["want"].items():
  if store.get(key) != value:
    fail(f"get({key!r}) = {store.get(key)!r}, expected {value!r}")
if store.get(DATA["absent"], "dflt") != "dflt":
  fail("get() of a missing key must return the default")
recs = records(path)
if len(recs) != DATA["writes"] or any(set(r) - {"op", "key", "value"} for r in recs):
  fail(f"the log has {len(recs)} records, expected {DATA['writes']} with keys op/key/value")
again = mod.Store(path)
if {k: again.get(k) for k in DATA["want"]} != DATA["want"] or again.get(DATA["gone"]) is not None:
  fail("a Store reopened on the log does not see the same data")
"""
)


def _ops(rng: random.Random, n: int):
  """Random set/del operations -> (ops, live dict, number of log writes, a deleted key)."""
  keys = [util.ident(rng, 1) + str(i) for i in range(max(3, n // 3))]
  live, ops, writes, gone = {}, [], 0, keys[0]
  for _ in range(n):
    k = rng.choice(keys)
    if live and rng.random() < 0.3:
      k = rng.choice(sorted(live))
      ops.append(["del", k, False])
      live.pop(k)
      writes += 1
      gone = k
    elif rng.random() < 0.1:
      ops.append(["del", "missing_" + k, True])
    else:
      v = rng.choice([rng.randint(0, 999), util.word(rng), [rng.randint(0, 9)]])
      ops.append(["set", k, v])
      live[k] = v
      writes += 1
  if gone in live:
    ops.append(["del", gone, False])
    live.pop(gone)
    writes += 1
  return ops, live, writes, gone


def _write(path: str, text: str) -> str:
  return f"cat > {path} <<'PYEOF'\n{text}PYEOF"


def kv_store(rng: random.Random, level: int) -> TaskSpec:
  ops, live, writes, gone = _ops(rng, (12, 30, 60)[level])
  instruction = """/workspace/kv/store.py holds the skeleton of a small append-only key-value store
used by our services. Implement the methods that raise NotImplementedError:

- every change is appended to the log file `path` as ONE JSON object per line:
  {"op": "set", "key": k, "value": v} or {"op": "del", "key": k} (no other keys), flushed to
  disk before the call returns;
- `Store(path)` replays an existing log, so a reopened store sees the same data;
- `get(key, default=None)` returns the value or `default`; values are any JSON value;
- `delete(key)` of a missing key raises KeyError and writes nothing.
Keep the class name, the constructor and the method signatures."""
  solve = "\n".join(
    (
      "sed -n '1,40p' kv/store.py",
      STEP_MARK,
      _write("kv/store.py", IMPL),
      STEP_MARK,
      "python3 -c \"import sys; sys.path.insert(0, 'kv'); import store, tempfile, "
      "os; s = store.Store(os.path.join(tempfile.mkdtemp(), 'x')); s.set('a', 1); "
      "assert store.Store(s.path).get('a') == 1; print('ok')\"",
    )
  )
  # Plausible wrong: persist a snapshot of the whole dict instead of appending to a log.
  wrong = _write(
    "kv/store.py",
    IMPL.replace(_APPEND, SNAPSHOT_APPEND).replace(
      "          self._apply(json.loads(line))", "          self.data = json.loads(line)"
    ),
  )
  return TaskSpec(
    instruction,
    STORE_CHECK,
    solve,
    wrong,
    files={"kv/store.py": STUB},
    data={"ops": ops, "want": live, "writes": writes, "gone": gone, "absent": "never_" + gone},
    complexity="moderate",
    language="python",
  )


COMPACT = '''
  def compact(self):
    """Rewrites the log as one set line per live key (sorted by key), atomically."""
    tmp = self.path + ".compact"
    with open(tmp, "w") as f:
      for key in sorted(self.data):
        f.write(json.dumps({"op": "set", "key": key, "value": self.data[key]}) + "\\n")
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, self.path)
'''

COMPACT_CHECK = (
  CHECK_COMMON
  + """
mod = load()
if not hasattr(mod.Store, "compact"):
  fail("Store has no compact() method")
recs = records("data/app.log")
want = DATA["app_live"]
if [r.get("key") for r in recs] != sorted(want) or any(r.get("op") != "set" for r in recs):
  fail(f"data/app.log holds {len(recs)} records; expected one set line per live key "
       f"({len(want)}), sorted by key")
app = mod.Store("data/app.log")
if {k: app.get(k) for k in want} != want:
  fail("data/app.log lost or changed data in the compaction")
path = os.path.join(tempfile.mkdtemp(), "c.log")
store = mod.Store(path)
run_ops(store, DATA["ops"])
store.compact()
store.set("after_compact", 1)
again = mod.Store(path)
expect = dict(DATA["live"], after_compact=1)
if {k: again.get(k) for k in expect} != expect:
  fail("a store is not usable (or loses data) after compact()")
if sorted(os.listdir(os.path.dirname(path))) != ["c.log"]:
  fail(f"compact() left files behind: {sorted(os.listdir(os.path.dirname(path)))}")
"""
)


def _history_log(rng: random.Random, n: int):
  ops, live, _, _ = _ops(rng, n)
  lines = []
  for op in ops:
    if op[0] == "set":
      lines.append({"op": "set", "key": op[1], "value": op[2]})
    elif not op[2]:
      lines.append({"op": "del", "key": op[1]})
  return "".join(json.dumps(rec) + "\n" for rec in lines), live


def compact(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  log, app_live = _history_log(rng, (40, 120, 300)[level])
  ops, live, _, _ = _ops(rng, (10, 20, 40)[level])
  instruction = """/workspace/kv/store.py is our append-only key-value store (one JSON line per
change; a reopened Store replays the log). The application's log data/app.log has grown long with
overwritten and deleted keys. Add a method `compact()` to Store: it rewrites the store's log as one
{"op": "set", "key": k, "value": v} line per live key, sorted by key, replacing the old log
atomically (write a temporary file in the same directory, then os.replace; no temporary file may
be left behind), and the store stays usable afterwards. Then compact data/app.log with it. Keep
everything the store already does working."""
  solve = "\n".join(
    (
      "grep -n 'def ' kv/store.py; wc -l data/app.log",
      STEP_MARK,
      f"cat >> kv/store.py <<'PYEOF'{COMPACT}PYEOF",
      STEP_MARK,
      "python3 -c \"import sys; sys.path.insert(0, 'kv'); import store; "
      "store.Store('data/app.log').compact()\"",
      STEP_MARK,
      "wc -l data/app.log",
    )
  )
  wrong = solve.replace("for key in sorted(self.data):", "for key in self.data:")
  return TaskSpec(
    instruction,
    COMPACT_CHECK,
    solve,
    wrong,
    files={"data/app.log": log},
    data={"app_live": app_live, "ops": ops, "live": live},
    complexity="moderate",
    language="python",
  )


EXPIRY = """
  def set(self, key, value, ttl=None):
    rec = {"op": "set", "key": key, "value": value}
    if ttl is not None:
      rec["expires"] = self.clock() + ttl
    self._append(rec)

  def _live(self, key):
    exp = self.expires.get(key)
    return key in self.data and (exp is None or self.clock() < exp)

  def get(self, key, default=None):
    return self.data[key] if self._live(key) else default
"""

EXPIRY_CHECK = (
  CHECK_COMMON
  + """
import inspect
mod = load()
if "clock" not in inspect.signature(mod.Store).parameters:
  fail("Store(path, clock=...) is missing")
now = [1000.0]
path = os.path.join(tempfile.mkdtemp(), "e.log")
store = mod.Store(path, clock=lambda: now[0])
for key, value, ttl in DATA["sets"]:
  store.set(key, value, ttl=ttl)
store.set("plain", 7)
now[0] += DATA["advance"]
for key, value, ttl in DATA["sets"]:
  want = value if ttl is None or ttl > DATA["advance"] else None
  if store.get(key) != want:
    fail(f"get({key!r}) = {store.get(key)!r} after {DATA['advance']}s (ttl {ttl}); "
         f"expected {want!r}")
again = mod.Store(path, clock=lambda: now[0])
if again.get("plain") != 7 or any(again.get(k) != store.get(k) for k, _, _ in DATA["sets"]):
  fail("a reopened store does not keep the expiry times")
again.compact()
keys = [r["key"] for r in records(path)]
alive = sorted([k for k, _, t in DATA["sets"] if t is None or t > DATA["advance"]] + ["plain"])
if keys != alive:
  fail(f"compact() should keep only the live keys {alive}, the log has {keys}")
"""
)


def expiry(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  advance = rng.choice((30, 60, 90))
  sets = []
  for i in range((4, 8, 12)[level]):
    # ttl == advance: the key expires exactly now (the boundary the wrong solution misses)
    ttl = advance if i == 0 else rng.choice((None, advance // 2, advance * 2, advance, advance + 1))
    sets.append([f"{util.word(rng)}{i}", rng.randint(0, 99), ttl])
  rng.shuffle(sets)
  instruction = """/workspace/kv/store.py is our append-only key-value store with compact(). Add
expiry: `Store(path, clock=time.time)` takes a clock (a function returning seconds), and
`set(key, value, ttl=None)` with a ttl stores an "expires" time (clock() + ttl) in its log line.
From the moment clock() >= expires, the key reads as missing (get returns the default). A reopened
store keeps expiry times (they are in the log), and compact() drops expired keys and keeps the
"expires" of the others. set(key, value) without ttl behaves as before."""
  patch = """python3 - <<'PYEOF'
import re
src = open("kv/store.py").read()
src = src.replace("def __init__(self, path):", "def __init__(self, path, clock=None):")
src = src.replace("    self.data = {}\\n", "    self.data = {}\\n    self.expires = {}\\n"
                  "    self.clock = clock or __import__('time').time\\n", 1)
src = src.replace("      self.data[rec[\\"key\\"]] = rec[\\"value\\"]\\n",
                  "      self.data[rec[\\"key\\"]] = rec[\\"value\\"]\\n"
                  "      self.expires.pop(rec[\\"key\\"], None)\\n"
                  "      if \\"expires\\" in rec:\\n"
                  "        self.expires[rec[\\"key\\"]] = rec[\\"expires\\"]\\n")
src = re.sub(r"\\n  def get\\(self.*?\\n\\n", "\\n\\n", src, flags=re.S)
src = re.sub(r"\\n  def set\\(self.*?\\n\\n", "\\n\\n", src, flags=re.S)
src = src.replace("for key in sorted(self.data):",
                  "for key in sorted(k for k in self.data if self._live(k)):")
src = src.replace('        f.write(json.dumps({"op": "set", "key": key, '
                  '"value": self.data[key]}) + "\\\\n")',
                  '        rec = {"op": "set", "key": key, "value": self.data[key]}\\n'
                  '        if key in self.expires:\\n'
                  '          rec["expires"] = self.expires[key]\\n'
                  '        f.write(json.dumps(rec) + "\\\\n")')
open("kv/store.py", "w").write(src.rstrip("\\n") + "\\n" + open("/tmp/expiry.py").read())
PYEOF"""
  solve = "\n".join(
    (
      "grep -n 'def \\|self.data' kv/store.py",
      STEP_MARK,
      f"cat > /tmp/expiry.py <<'PYEOF'{EXPIRY}PYEOF",
      STEP_MARK,
      patch,
      STEP_MARK,
      "python3 -c \"import sys; sys.path.insert(0, 'kv'); import store, tempfile, "
      "os; t = [0]; s = store.Store(os.path.join(tempfile.mkdtemp(), 'x'), "
      "clock=lambda: t[0]); s.set('a', 1, ttl=5); t[0] = 9; assert s.get('a') is "
      "None; print('ok')\"",
    )
  )
  # Plausible wrong: a key expires only strictly after its time (clock() > expires).
  wrong = solve.replace("self.clock() < exp", "self.clock() <= exp")
  return TaskSpec(
    instruction,
    EXPIRY_CHECK,
    solve,
    wrong,
    data={"sets": sets, "advance": advance},
    complexity="complex",
    language="python",
  )


BATCH = '''
  def batch(self):
    """with store.batch(): ... -> all operations land as ONE log line, applied atomically."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
      ops, real = [], self._append
      self._append = lambda rec: (ops.append(rec), self._apply(rec))
      try:
        yield self
      finally:
        self._append = real
      if ops:
        with open(self.path, "a") as f:
          f.write(json.dumps({"op": "batch", "ops": ops}) + "\\n")
          f.flush()
          os.fsync(f.fileno())
    return ctx()
'''

BATCH_CHECK = (
  CHECK_COMMON
  + """
mod = load()
path = os.path.join(tempfile.mkdtemp(), "b.log")
store = mod.Store(path)
store.set("before", 1)
with store.batch():
  for key, value in DATA["batch"]:
    store.set(key, value)
recs = records(path)
if (len(recs) != 2 or recs[1].get("op") != "batch"
    or len(recs[1].get("ops", [])) != len(DATA["batch"])):
  fail(f"the batch should be one log line {{'op': 'batch', 'ops': [...]}}; the log has {recs[1:]}")
want = dict(DATA["batch"], before=1)
again = mod.Store(path)
if {k: again.get(k) for k in want} != want:
  fail("a reopened store does not apply the batch")
with open(path, "a") as f:
  f.write(open(path).read().splitlines()[1][: DATA["cut"]])
torn = mod.Store(path)
if {k: torn.get(k) for k in want} != want:
  fail("a torn (incomplete) last log line must be ignored on replay, not break it")
"""
)


def batch(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  items = [[f"{util.word(rng)}_{i}", rng.randint(0, 999)] for i in range((3, 6, 10)[level])]
  instruction = """/workspace/kv/store.py is our append-only key-value store (one JSON line per
change). Add atomic batches: `with store.batch(): store.set(...); store.delete(...)` writes all the
operations of the block as ONE log line {"op": "batch", "ops": [<the usual set/del records>]} when
the block ends (nothing for an empty block), and a reopened store applies it. A crash can leave a
torn, incomplete last line in the log: replay must ignore an incomplete (not JSON) LAST line."""
  replay = '''python3 - <<'PYEOF'
src = open("kv/store.py").read()
src = src.replace("""        if line.strip():
          self._apply(json.loads(line))""", """        if line.strip():
          try:
            rec = json.loads(line)
          except ValueError:
            break  # a torn last line
          for r in rec["ops"] if rec["op"] == "batch" else [rec]:
            self._apply(r)""")
open("kv/store.py", "w").write(src)
PYEOF'''
  solve = "\n".join(
    (
      "sed -n '/def _replay/,/def get/p' kv/store.py",
      STEP_MARK,
      f"cat >> kv/store.py <<'PYEOF'{BATCH}PYEOF",
      STEP_MARK,
      replay,
      STEP_MARK,
      "python3 -m py_compile kv/store.py",
    )
  )
  wrong = solve.replace("break  # a torn last line", "raise")
  return TaskSpec(
    instruction,
    BATCH_CHECK,
    solve,
    wrong,
    data={"batch": items, "cut": rng.randint(5, 20)},
    complexity="moderate",
    language="python",
  )


ROOT = Family(
  "kv_store",
  "software_engineering",
  "fuzz_equivalence",
  "text_only",
  kv_store,
  skills=("python classes", "file formats", "persistence"),
)
FAMILIES = (ROOT,)
CHAIN = ChainFamily(
  name="kv_log",
  goal="grow a small log-structured key-value store for our services",
  root=ROOT,
  root_requirement="implement the append-only log store (set/get/delete, replay)",
  extensions=(
    Extension("compact", ("kv_store",), "log compaction with an atomic replace", compact),
    Extension("expiry", ("compact",), "keys with a time to live (injectable clock)", expiry),
    Extension("batch", ("kv_store",), "atomic batches; torn last lines ignored", batch),
  ),
)
