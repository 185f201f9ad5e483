"""backup_rotation chain (system_administration): full backup -> incremental -> restore / dedup.

  backup_full   copy /workspace/data into backups/full-1/ with a sha256sum-style manifest
  incremental   data/ changed (edits, new files, deletions): backups/inc-2/ holds only what is new
                or changed since the last backup (found through the parent's manifest); its
                manifest maps every current file to the backup holding its bytes; deletions listed
  restore       (after incremental) data/ is lost: rebuild the state of inc-2 in restore/ from the
                chain of backups, without resurrecting deleted files
  dedup         (branch after incremental) a third backup after renames and copies: content any
                earlier backup already holds is referenced, never stored again

A backup directory and its manifest never change once written, so every generation's check of its
own backup stays exact under later generations; `backups/LATEST` only has to name an existing
backup.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.chains import STEP_MARK, ChainFamily, Extension
from tmax_jax.tasks.procedural.core import Family, TaskSpec

CHECK_COMMON = """
import hashlib


def sha(path):
  return hashlib.sha256(open(path, "rb").read()).hexdigest()


def backup_files(name):
  root = "backups/" + name
  if not os.path.isdir(root):
    fail(f"{root} does not exist")
  out = {}
  for d, _, names in os.walk(root):
    for n in names:
      p = os.path.join(d, n)
      out[os.path.relpath(p, root)] = sha(p)
  return out


def expect_backup(name, files, manifest_lines):
  got = backup_files(name)
  if got != files:
    extra, missing = sorted(set(got) - set(files)), sorted(set(files) - set(got))
    fail(f"backups/{name} should hold exactly {len(files)} files (extra {extra[:4]}, missing "
         f"{missing[:4]}, or wrong bytes)")
  if lines(f"backups/{name}.manifest") != manifest_lines:
    fail(f"backups/{name}.manifest is not the expected {len(manifest_lines)} sorted lines")
  latest = read("backups/LATEST").strip() if os.path.isfile("backups/LATEST") else ""
  if not latest or not os.path.isdir("backups/" + latest):
    fail("backups/LATEST must name an existing backup")
"""

FULL_CHECK = (
  CHECK_COMMON
  + """
expect_backup("full-1", DATA["files"], DATA["manifest"])
"""
)

# Manifest helpers every oracle of the chain shares (python, run from /workspace).
ORACLE_LIB = """import hashlib, os, shutil
def sha(p):
  return hashlib.sha256(open(p, "rb").read()).hexdigest()
def tree(root):
  out = {}
  for d, _, names in os.walk(root):
    for n in names:
      p = os.path.join(d, n)
      out[os.path.relpath(p, root)] = sha(p)
  return out
def store(src_root, rel, name):
  os.makedirs(os.path.dirname(f"backups/{name}/{rel}") or ".", exist_ok=True)
  shutil.copyfile(f"{src_root}/{rel}", f"backups/{name}/{rel}")
def holders(name):
  # rel -> (sha, backup holding the bytes) from a backup's manifest
  out = {}
  for line in open(f"backups/{name}.manifest"):
    parts = line.split()
    out[parts[1]] = (parts[0], parts[2] if len(parts) > 2 else name)
  return out
"""


def _oracle(body: str) -> str:
  return "python3 - <<'PY'\n" + ORACLE_LIB + body.strip("\n") + "\nPY"


def _digest(data: str) -> str:
  return hashlib.sha256(data.encode()).hexdigest()


def _tree(rng: random.Random, n: int) -> dict[str, str]:
  files = {}
  while len(files) < n:
    depth = rng.randint(0, 2)
    rel = "/".join([util.word(rng) for _ in range(depth)] + [f"{util.word(rng)}_{len(files)}.txt"])
    files[rel] = util.text_blob(rng, rng.randint(3, 30))
  return files


def backup_full(rng: random.Random, level: int) -> TaskSpec:
  files = _tree(rng, (6, 15, 40)[level])
  digests = {rel: _digest(body) for rel, body in files.items()}
  manifest = [f"{digests[r]}  {r}" for r in sorted(digests)]
  instruction = """You run the backups of a small server. The data to protect is /workspace/data.
Make its first, full backup:
- copy every file of data/ to backups/full-1/<same relative path>, byte for byte;
- write backups/full-1.manifest in `sha256sum` format: `<sha256 hex>  <path relative to data/>`
  (two spaces), one line per file, sorted by path (LC_ALL=C);
- write the backup's name (full-1) to backups/LATEST.
Later backups are incremental and read the latest manifest, so keep it exact. A backup directory
and its manifest are never changed once written."""
  solve = "\n".join(
    (
      "find data -type f | head -20; du -sh data",
      STEP_MARK,
      _oracle("""
files = tree("data")
for rel in files:
  store("data", rel, "full-1")
with open("backups/full-1.manifest", "w") as f:
  f.writelines(f"{files[r]}  {r}\\n" for r in sorted(files))
open("backups/LATEST", "w").write("full-1\\n")
"""),
      STEP_MARK,
      "cd backups/full-1 && sha256sum -c --quiet ../full-1.manifest && echo verified",
    )
  )
  # Plausible wrong: paths in the manifest relative to /workspace (data/...), as `find` prints them.
  wrong = (
    "mkdir -p backups && cp -r data backups/full-1 && (find data -type f | LC_ALL=C sort | "
    "xargs sha256sum > backups/full-1.manifest) && echo full-1 > backups/LATEST"
  )
  return TaskSpec(
    instruction,
    FULL_CHECK,
    solve,
    wrong,
    files={f"data/{r}": b for r, b in files.items()},
    data={"files": digests, "manifest": manifest, "state": files},
    complexity="moderate",
    language="python",
  )


INC_CHECK = (
  CHECK_COMMON
  + """
expect_backup(DATA["name"], DATA["stored"], DATA["manifest"])
deleted = lines(f"backups/{DATA['name']}.deleted") if os.path.exists(
    f"backups/{DATA['name']}.deleted") else []
if deleted != DATA["deleted"]:
  fail(f"backups/{DATA['name']}.deleted should list {DATA['deleted'][:4]}..., got {deleted[:4]}")
"""
)

INC_BODY = """
prev = open("backups/LATEST").read().strip()
known = holders(prev)
by_sha = {}
for rel, (h, where) in sorted(known.items()):
  by_sha.setdefault(h, where if DEDUP else None)
files, rows = tree("data"), []
for rel in sorted(files):
  h = files[rel]
  if rel in known and known[rel][0] == h:
    rows.append((h, rel, known[rel][1]))
  elif DEDUP and by_sha.get(h):
    rows.append((h, rel, by_sha[h]))
  else:
    store("data", rel, NAME)
    rows.append((h, rel, NAME))
os.makedirs(f"backups/{NAME}", exist_ok=True)
with open(f"backups/{NAME}.manifest", "w") as f:
  f.writelines(f"{h}  {rel}  {where}\\n" for h, rel, where in rows)
with open(f"backups/{NAME}.deleted", "w") as f:
  f.writelines(rel + "\\n" for rel in sorted(set(known) - set(files)))
open("backups/LATEST", "w").write(NAME + "\\n")
"""


def _change(rng: random.Random, state: dict[str, str], level: int, renames: bool = False):
  """Edits, new files, deletions (and renames/copies) of a data tree -> (new state, deleted)."""
  new = dict(state)
  rels = sorted(state)
  for rel in rng.sample(rels, (1, 3, 6)[level]):
    new[rel] = state[rel] + util.text_blob(rng, 3)
  for i in range((1, 3, 5)[level]):
    new[f"{util.word(rng)}/added_{i}_{rng.randint(0, 999)}.txt"] = util.text_blob(rng, 8)
  deleted = sorted(rng.sample([r for r in rels if new[r] == state[r]], (1, 2, 4)[level]))
  for rel in deleted:
    new.pop(rel)
  moves = []
  if renames:  # content the backups already hold under another path
    for rel in rng.sample([r for r in sorted(new) if r in state and new[r] == state[r]], 2):
      dst = f"moved/{rel.replace('/', '_')}"
      new[dst] = new.pop(rel)
      moves.append((rel, dst))
      deleted = sorted(set(deleted) | {rel})
  return new, deleted, moves


def _setup(old: dict[str, str], new: dict[str, str], moves) -> tuple[dict, str]:
  """Seeds (changed/new files) + setup (deletions, moves) turning data/ from old into new."""
  sources, targets = {s for s, _ in moves}, {d for _, d in moves}
  seeds = {f"data/{r}": b for r, b in new.items() if old.get(r) != b and r not in targets}
  cmds = [
    f"mkdir -p data/{dst.rsplit('/', 1)[0]} && mv data/{src} data/{dst}" for src, dst in moves
  ]
  cmds += [f"rm -f data/{r}" for r in sorted(set(old) - set(new)) if r not in sources]
  return seeds, "\n".join(cmds)


def _expect(name: str, old_holders: dict, new: dict[str, str], dedup: bool):
  """What an incremental backup `name` must store and its manifest lines."""
  by_sha = {}
  for _, (h, where) in sorted(old_holders.items()):
    by_sha.setdefault(h, where)
  stored, rows, holders = {}, [], {}
  for rel in sorted(new):
    h = _digest(new[rel])
    if rel in old_holders and old_holders[rel][0] == h:
      where = old_holders[rel][1]
    elif dedup and h in by_sha:
      where = by_sha[h]
    else:
      where, stored[rel] = name, h
    rows.append(f"{h}  {rel}  {where}")
    holders[rel] = (h, where)
  return stored, rows, holders


def _incremental(rng, level, specs, name, dedup):
  parent = specs[-1].data
  old = parent["state"]
  new, deleted, moves = _change(rng, old, level, renames=dedup)
  seeds, setup = _setup(old, new, moves)
  old_holders = parent.get("holders") or {r: (_digest(b), "full-1") for r, b in old.items()}
  stored, rows, holders = _expect(name, old_holders, new, dedup)
  body = f"NAME, DEDUP = {name!r}, {dedup}\n" + INC_BODY
  solve = "\n".join(
    (
      "cat backups/LATEST; ls backups; find data -newer backups/LATEST -type f | head",
      STEP_MARK,
      _oracle(body),
      STEP_MARK,
      f"wc -l backups/{name}.manifest backups/{name}.deleted",
    )
  )
  return (
    seeds,
    setup,
    solve,
    {
      "name": name,
      "stored": stored,
      "manifest": rows,
      "deleted": sorted(set(old) - set(new)),
      "state": new,
      "holders": holders,
    },
  )


def incremental(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  seeds, setup, solve, data = _incremental(rng, level, specs, "inc-2", dedup=False)
  instruction = """You run the backups of /workspace/data. backups/LATEST names the last backup and
backups/<name>.manifest lists its files (`<sha256>  <path>`; incremental manifests add a third
column). Since then data/ changed: files were edited, added and deleted.
Make the incremental backup inc-2:
- backups/inc-2/<path> holds ONLY the files that are new or whose content changed since the last
  backup (compare with its manifest; unchanged files are not copied again);
- backups/inc-2.manifest lists EVERY current file of data/ as `<sha256>  <path>  <backup>` (two
  spaces between fields), <backup> being the backup that holds those bytes (full-1 for unchanged
  files, inc-2 for stored ones), sorted by path;
- backups/inc-2.deleted lists the paths deleted since the last backup, sorted;
- backups/LATEST then names inc-2. Never change an existing backup."""
  # Plausible wrong: store every current file again (a second full backup named inc-2).
  wrong = solve.replace(
    "  if rel in known and known[rel][0] == h:\n    rows.append((h, rel, known[rel][1]))\n  elif",
    "  if",
  )
  return TaskSpec(
    instruction,
    INC_CHECK,
    solve,
    wrong,
    files=seeds,
    setup=setup,
    data=data,
    complexity="complex",
    language="python",
  )


def dedup(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  seeds, setup, solve, data = _incremental(rng, level, specs, "inc-3", dedup=True)
  instruction = """You run the backups of /workspace/data (backups/LATEST names the last backup;
backups/<name>.manifest maps every file to `<sha256>  <path>  <backup holding the bytes>`).
Since the last backup, files were edited, added, deleted, and some were moved or copied to new
paths. Make the incremental backup inc-3 with deduplication:
- backups/inc-3/<path> holds only content that NO earlier backup holds (a moved or copied file
  whose bytes some backup already stores is not stored again: its manifest line names that
  backup; when several do, the one listed for the first such path in byte order);
- backups/inc-3.manifest lists every current file as `<sha256>  <path>  <backup>`, sorted;
- backups/inc-3.deleted lists the paths that are gone since the last backup (moved-away paths
  included), sorted; then backups/LATEST names inc-3. Never change an existing backup."""
  # Plausible wrong: the plain incremental (stores moved files again).
  wrong = solve.replace("NAME, DEDUP = 'inc-3', True", "NAME, DEDUP = 'inc-3', False")
  return TaskSpec(
    instruction,
    INC_CHECK,
    solve,
    wrong,
    files=seeds,
    setup=setup,
    data=data,
    complexity="complex",
    language="python",
  )


RESTORE_CHECK = """
import hashlib
got = {}
for d, _, names in os.walk("restore"):
  for n in names:
    p = os.path.join(d, n)
    got[os.path.relpath(p, "restore")] = hashlib.sha256(open(p, "rb").read()).hexdigest()
want = DATA["want"]
if got != want:
  extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
  wrong = sorted(r for r in set(got) & set(want) if got[r] != want[r])
  fail(f"restore/ differs from the inc-2 state: extra {extra[:4]}, missing {missing[:4]}, "
       f"wrong bytes {wrong[:4]}")
if lines("restore.log") != [f"restored {len(want)} files from inc-2"]:
  fail("restore.log should say: restored <N> files from inc-2")
"""


def restore(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  del rng, level
  state = specs[-1].data["state"]
  want = {rel: _digest(b) for rel, b in state.items()}
  instruction = """The disk holding /workspace/data failed (the directory is gone). The backups in
/workspace/backups survived: backups/LATEST names the newest one (inc-2), whose manifest
backups/inc-2.manifest maps every file of that moment to `<sha256>  <path>  <backup holding the
bytes>`. Restore the state of inc-2 into /workspace/restore/ (same relative paths), taking each
file from the backup its manifest line names; files deleted before inc-2 must not come back.
Check every restored file against its sha256, then write restore.log with the single line
`restored <N> files from inc-2`."""
  solve = "\n".join(
    (
      "cat backups/LATEST; head -5 backups/inc-2.manifest",
      STEP_MARK,
      _oracle("""
name = open("backups/LATEST").read().strip()
rows = holders(name)
for rel, (h, where) in sorted(rows.items()):
  os.makedirs(os.path.dirname(f"restore/{rel}") or ".", exist_ok=True)
  shutil.copyfile(f"backups/{where}/{rel}", f"restore/{rel}")
  assert sha(f"restore/{rel}") == h, rel
open("restore.log", "w").write(f"restored {len(rows)} files from {name}\\n")
"""),
      STEP_MARK,
      "cat restore.log && find restore -type f | wc -l",
    )
  )
  # Plausible wrong: overlay every backup in order (full-1, then inc-2): deleted files come back.
  wrong = (
    "mkdir -p restore && cp -r backups/full-1/. restore/ && cp -r backups/inc-2/. restore/ "
    '&& echo "restored $(find restore -type f | wc -l) files from inc-2" > restore.log'
  )
  return TaskSpec(
    instruction,
    RESTORE_CHECK,
    solve,
    wrong,
    setup="rm -rf data",
    data={"want": want},
    complexity="moderate",
    language="python",
  )


ROOT = Family(
  "backup_full",
  "system_administration",
  "exact_text",
  "text_only",
  backup_full,
  skills=("backups", "checksums", "incremental sync"),
)
FAMILIES = (ROOT,)
CHAIN = ChainFamily(
  name="backup_rotation",
  goal="keep restorable backups of a server's data",
  root=ROOT,
  root_requirement="a full backup with a sha256sum manifest",
  extensions=(
    Extension(
      "incremental",
      ("backup_full",),
      "an incremental backup of what changed since the last manifest",
      incremental,
    ),
    Extension(
      "restore", ("incremental",), "restore the latest state from the chain of backups", restore
    ),
    Extension(
      "dedup", ("incremental",), "a deduplicating incremental after moves and copies", dedup
    ),
  ),
)
