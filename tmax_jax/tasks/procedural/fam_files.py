"""file_operations families: finding, deduplicating, organising, unpacking, permissioning files."""

from __future__ import annotations

import hashlib
import random

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec

CHECK_LIST = """
got = lines("/workspace/answer.txt")
if got != DATA["want"]:
  fail(f"answer.txt has {len(got)} lines, expected {len(DATA['want'])}; first diff at "
       f"{next((i for i, (a, b) in enumerate(zip(got, DATA['want'])) if a != b), min(len(got), len(DATA['want'])))}")
"""  # noqa: E501 (embedded script, kept verbatim)


def find_large(rng: random.Random, level: int) -> TaskSpec:
  n = (30, 200, 800)[level]
  exts = ["log", "txt", "csv", "bin", "dat"]
  target = rng.sample(exts, (1, 2, 2)[level])
  threshold = rng.choice((1000, 2048, 4096))
  files, want = {}, []
  for i in range(n):
    depth = rng.randint(0, (1, 3, 5)[level])
    d = "/".join(util.word(rng) for _ in range(depth))
    ext = rng.choice(exts)
    if rng.random() < 0.2:
      ext = ext.upper()
    size = rng.choice((threshold, threshold + 1, rng.randint(10, threshold * 2)))
    rel = f"data/{d}/{util.word(rng)}_{i}.{ext}".replace("//", "/")
    files[rel] = (util.token(rng, 60) * (size // 60 + 1))[:size]
  trap = f"data/TRAP_{rng.randint(0, 99)}.{target[0].upper()}"
  files[trap] = "x" * (threshold + 5)
  for rel, body in files.items():
    if rel.rsplit(".", 1)[1].lower() in target and len(body) > threshold:
      want.append(rel[len("data/") :])
  want.sort()
  exts_txt = " or ".join(f"`.{e}`" for e in target)
  instruction = f"""Find every file under /workspace/data whose extension is {exts_txt} (compare the
extension case-insensitively) and whose size is strictly greater than {threshold} bytes.
Write their paths relative to /workspace/data, one per line, sorted in byte order (LC_ALL=C), to
/workspace/answer.txt."""
  cond = " -o ".join(f"-iname '*.{e}'" for e in target)
  solve = (
    f"cd data && find . -type f \\( {cond} \\) -size +{threshold}c | sed 's|^\\./||' "
    "| LC_ALL=C sort > /workspace/answer.txt"
  )
  wrong_cond = " -o ".join(f"-name '*.{e}'" for e in target)
  wrong = (
    f"cd data && find . -type f \\( {wrong_cond} \\) -size +{threshold}c | sed 's|^\\./||' "
    "| LC_ALL=C sort > /workspace/answer.txt"
  )
  return TaskSpec(
    instruction,
    CHECK_LIST,
    solve,
    wrong,
    files=files,
    data={"want": want},
    complexity=("short", "short", "moderate")[level],
  )


def dedupe(rng: random.Random, level: int) -> TaskSpec:
  n_groups, n_single = (3, 10, 40)[level], (10, 40, 150)[level]
  files, groups = {}, []
  size = 256
  for g in range(n_groups):
    body = util.token(rng, size)
    members = sorted(f"pool/{util.word(rng)}{g}_{k}.bin" for k in range(rng.randint(2, 4)))
    for m in members:
      files[m] = body
    groups.append(members)
  for i in range(
    n_single
  ):  # same size as the duplicates, different bytes: size-only grouping fails
    files[f"pool/{util.word(rng)}_u{i}.bin"] = util.token(rng, size)
  want = sorted(" ".join(p[len("pool/") :] for p in g) for g in groups)
  instruction = """/workspace/pool contains files, some of which are byte-for-byte duplicates of
each other. Write one line per group of identical files (groups of 2 or more) to
/workspace/answer.txt: the file names of the group (relative to /workspace/pool) sorted and
separated by single spaces; sort the lines themselves in byte order (LC_ALL=C)."""
  solve = """python3 - <<'PY'
import hashlib, os, collections
g = collections.defaultdict(list)
for n in os.listdir('pool'):
  g[hashlib.sha256(open('pool/' + n, 'rb').read()).hexdigest()].append(n)
out = sorted(' '.join(sorted(v)) for v in g.values() if len(v) > 1)
open('answer.txt', 'w').write(''.join(l + '\\n' for l in out))
PY"""
  wrong = """python3 - <<'PY'
import os, collections
g = collections.defaultdict(list)
for n in os.listdir('pool'):
  g[os.path.getsize('pool/' + n)].append(n)
out = sorted(' '.join(sorted(v)) for v in g.values() if len(v) > 1)
open('answer.txt', 'w').write(''.join(l + '\\n' for l in out))
PY"""
  return TaskSpec(
    instruction,
    CHECK_LIST,
    solve,
    wrong,
    files=files,
    data={"want": want},
    complexity="short",
    language="python",
  )


CHECK_TREE = """
import os
left = sorted(os.listdir("/workspace/inbox")) if os.path.isdir("/workspace/inbox") else []
if left:
  fail(f"inbox is not empty: {left[:5]}")
for rel, digest in DATA["want"].items():
  p = "/workspace/sorted/" + rel
  if not os.path.isfile(p):
    fail(f"missing {p}")
  import hashlib
  if hashlib.sha256(open(p, "rb").read()).hexdigest() != digest:
    fail(f"{p} has the wrong content")
extra = []
for root, _, names in os.walk("/workspace/sorted"):
  for n in names:
    rel = os.path.relpath(os.path.join(root, n), "/workspace/sorted")
    if rel not in DATA["want"]:
      extra.append(rel)
if extra:
  fail(f"unexpected files under sorted/: {extra[:5]}")
"""


def organize_by_date(rng: random.Random, level: int) -> TaskSpec:
  fmts = (
    ("IMG_{y}{m}{d}_{k}.jpg",),
    ("IMG_{y}{m}{d}_{k}.jpg", "report-{y}-{m}-{d}-{k}.pdf"),
    ("IMG_{y}{m}{d}_{k}.jpg", "report-{y}-{m}-{d}-{k}.pdf", "scan {d}.{m}.{y} {k}.png"),
  )[level]
  n = (12, 40, 120)[level]
  files, want = {}, {}
  for k in range(n):
    y, m, d = rng.randint(2015, 2024), rng.randint(1, 12), rng.randint(1, 28)
    name = rng.choice(fmts).format(y=y, m=f"{m:02d}", d=f"{d:02d}", k=k)
    body = util.text_blob(rng, 8)
    files[f"inbox/{name}"] = body
    want[f"{y}/{m:02d}/{name}"] = hashlib.sha256(body.encode()).hexdigest()
  desc = "\n".join(f"  - `{f.format(y='YYYY', m='MM', d='DD', k='N')}`" for f in fmts)
  instruction = f"""/workspace/inbox holds files whose names carry a date, in these patterns:
{desc}
Move every file to /workspace/sorted/YYYY/MM/<original name> (year and two-digit month from the
date in its name). When you are done /workspace/inbox must be empty and sorted/ must contain only
the moved files."""
  solve = """python3 - <<'PY'
import os, re, shutil
pats = [r'IMG_(\\d{4})(\\d{2})\\d{2}_', r'report-(\\d{4})-(\\d{2})-\\d{2}-', r'scan \\d{2}\\.(\\d{2})\\.(\\d{4}) ']
for n in sorted(os.listdir('inbox')):
  for i, p in enumerate(pats):
    m = re.match(p, n)
    if m:
      y, mo = (m.group(2), m.group(1)) if i == 2 else (m.group(1), m.group(2))
      os.makedirs(f'sorted/{y}/{mo}', exist_ok=True)
      shutil.move(f'inbox/{n}', f'sorted/{y}/{mo}/{n}')
      break
PY"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = solve.replace("shutil.move", "shutil.copy")
  return TaskSpec(
    instruction,
    CHECK_TREE,
    solve,
    wrong,
    files=files,
    data={"want": want},
    complexity=("short", "moderate", "moderate")[level],
    language="python",
  )


def nested_archive(rng: random.Random, level: int) -> TaskSpec:
  depth = (2, 3, 5)[level]
  flag = "FLAG{" + util.token(rng, 16) + "}"
  inner = {
    "deep/flag.txt": (flag + "\n").encode(),
    "deep/notes.md": util.text_blob(rng, 20).encode(),
  }
  blob, name = None, "payload"
  kinds = ["tar.gz", "zip", "tar"]
  for lvl in range(depth):
    kind = rng.choice(kinds)
    files = dict(inner)
    files[f"readme_{lvl}.txt"] = f"old key was FLAG{{{util.token(rng, 16)}}} (revoked)\n".encode()
    blob = (
      util.zip_bytes(files)
      if kind == "zip"
      else util.tar_bytes(files, "w:gz" if kind == "tar.gz" else "w")
    )
    name = f"layer{depth - lvl}.{kind}"
    inner = {name: blob}
  instruction = f"""/workspace/{name} is an archive that contains other archives (tar, tar.gz and
zip, nested {depth} levels deep). Somewhere inside there is a file named `flag.txt`. Write its
content (a single line FLAG{{...}}) to /workspace/answer.txt. Other files mention revoked flags;
ignore them."""
  solve = f"""mkdir -p x && cp {name} x/ && cd x
for i in $(seq 10); do
  for f in $(find . -type f \\( -name '*.tar.gz' -o -name '*.tar' -o -name '*.zip' \\)); do
    d="$f.d"; mkdir -p "$d"
    case "$f" in *.zip) python3 -m zipfile -e "$f" "$d";; *) tar xf "$f" -C "$d";; esac
    rm "$f"
  done
done
cat $(find . -name flag.txt) > /workspace/answer.txt"""
  wrong = f"""mkdir -p x && cd x
case {name} in *.zip) python3 -m zipfile -e ../{name} .;; *) tar xf ../{name};; esac
grep -rho --include='*.txt' 'FLAG{{[^}}]*}}' . | head -1 > /workspace/answer.txt"""
  check = """
got = read("/workspace/answer.txt").strip()
if got != DATA["flag"]:
  fail(f"answer.txt is {got[:40]!r}, not the flag")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={name: blob},
    data={"flag": flag},
    complexity=("short", "moderate", "moderate")[level],
  )


def permissions(rng: random.Random, level: int) -> TaskSpec:
  files, want = {}, {}
  n = (3, 6, 12)[level]
  for i in range(n):
    files[f"app/bin/{util.word(rng)}{i}.sh"] = "#!/bin/sh\necho hi\n"
    files[f"app/conf/{util.word(rng)}{i}.ini"] = "[x]\ny=1\n"
    files[f"app/secrets/{util.word(rng)}{i}.key"] = util.token(rng, 32) + "\n"
  for rel in files:
    sub = rel.split("/")[1]
    want[rel] = {"bin": "755", "conf": "644", "secrets": "600"}[sub]
  for d in ("app", "app/bin", "app/conf"):
    want[d] = "755"
  want["app/secrets"] = "700"
  extra = ""
  if level >= 1:
    want["app/conf"] = "750"
    extra += "\n- the directory app/conf is 750"
  if level >= 2:
    files["app/bin/README"] = "docs\n"
    want["app/bin/README"] = "644"
    extra += "\n- app/bin/README is a plain document: 644"
  instruction = f"""Fix the permissions under /workspace/app so that exactly:
- every `*.sh` file in app/bin is 755
- every file in app/conf is 644 and every file in app/secrets is 600
- the directory app/secrets is 700; every other directory is 755{extra}"""
  setup = "chmod -R 777 app"
  solve = """find app -type d -exec chmod 755 {} +
chmod 755 app/bin/*.sh; chmod 644 app/conf/*; chmod 600 app/secrets/*; chmod 700 app/secrets
if [ -f app/bin/README ]; then chmod 644 app/bin/README; fi"""
  if level >= 1:
    solve += "\nchmod 750 app/conf"
  wrong = "chmod -R 755 app; chmod 644 app/conf/*; chmod 600 app/secrets/*"
  check = """
import os, stat
for rel, mode in DATA["want"].items():
  p = "/workspace/" + rel
  if not os.path.exists(p):
    fail(f"{p} is missing")
  got = oct(stat.S_IMODE(os.lstat(p).st_mode))[2:]
  if got != mode:
    fail(f"{p} has mode {got}, expected {mode}")
"""
  return TaskSpec(instruction, check, solve, wrong, files=files, data={"want": want}, setup=setup)


FAMILIES = (
  Family("find_large_files", "file_operations", "exact_text", "text_only", find_large, ("find",)),
  Family("dedupe_files", "file_operations", "exact_text", "text_only", dedupe, ("hashing",)),
  Family(
    "organize_by_date", "file_operations", "exact_text", "text_only", organize_by_date, ("regex",)
  ),
  Family(
    "nested_archive", "file_operations", "exact_text", "text_only", nested_archive, ("tar", "zip")
  ),
  Family(
    "fix_permissions", "system_administration", "exact_text", "text_only", permissions, ("chmod",)
  ),
)
