"""system_administration families: cron schedules, accounts, log cleanup scripts, sshd hardening."""

from __future__ import annotations

import datetime
import random

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec

DOW = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")

CRON_LIB = """
import datetime
DOW = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
def field(spec, lo, hi, names=()):
  out = set()
  for part in spec.lower().split(","):
    rng_, _, step = part.partition("/")
    step = int(step) if step else 1
    if rng_ == "*":
      a, b = lo, hi
    else:
      a, _, b = rng_.partition("-")
      conv = lambda x: names.index(x) if x in names else int(x)
      a = conv(a); b = conv(b) if b else a
    out.update(range(a, b + 1, step))
  return out
def runs(expr, start, n):
  mi, ho, dom, mon, dow = expr.split()
  M, H, D, MO = field(mi, 0, 59), field(ho, 0, 23), field(dom, 1, 31), field(mon, 1, 12)
  W = {d % 7 for d in field(dow, 0, 7, DOW)}
  t, out = start + datetime.timedelta(minutes=1), []
  while len(out) < n:
    cw = (t.weekday() + 1) % 7  # cron: Sunday = 0
    if dom != "*" and dow != "*":
      day_ok = t.day in D or cw in W
    else:
      day_ok = t.day in D and cw in W
    if t.minute in M and t.hour in H and t.month in MO and day_ok:
      out.append(t.strftime("%Y-%m-%d %H:%M"))
    t += datetime.timedelta(minutes=1)
  return out
"""


def cron_next(rng: random.Random, level: int) -> TaskSpec:
  exprs = []
  for j in range((1, 3, 5)[level]):
    mi = rng.choice((str(rng.randint(0, 59)), f"*/{rng.choice((10, 15, 20))}", "0,30"))
    ho = rng.choice((str(rng.randint(0, 23)), "9-17", "*/6")) if level else str(rng.randint(0, 23))
    dow = (
      rng.choice(("1-5", "mon-fri", "0,6", "sat", str(rng.randint(0, 6))))
      if level >= 2
      else str(rng.randint(0, 6))
    )
    dom = rng.choice(("*", "*", "1,15")) if level >= 1 and j > 0 else "*"
    exprs.append(f"{mi} {ho} {dom} * {dow}")
  names = [f"job_{util.word(rng)}{i}" for i in range(len(exprs))]
  start = datetime.datetime(
    2024, rng.randint(1, 11), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59)
  )
  ns: dict = {}
  exec(CRON_LIB, ns)
  want = [f"{n} {t}" for n, e in zip(names, exprs, strict=True) for t in ns["runs"](e, start, 3)]
  tab = "".join(f"{e} /usr/local/bin/{n}.sh  # {n}\n" for n, e in zip(names, exprs, strict=True))
  instruction = f"""/workspace/crontab is a standard (Vixie) crontab. Starting strictly after
{start:%Y-%m-%d %H:%M} (all times in the same zone, no DST), compute the next 3 run times of every
job. Write /workspace/schedule.txt with lines `<job name> YYYY-MM-DD HH:MM` (job name = the comment
at the end of its line), jobs in crontab order, times ascending. Remember the usual cron rules for
the day-of-month / day-of-week fields (Sunday is 0 or 7)."""
  solve = (
    f"cat > /tmp/cron.py <<'PY'\n{CRON_LIB}\nimport sys\n"
    f"start = datetime.datetime.strptime('{start:%Y-%m-%d %H:%M}', '%Y-%m-%d %H:%M')\n"
    "with open('/workspace/schedule.txt', 'w') as f:\n  for line in open('/workspace/crontab'):\n"
    "    if not line.strip(): continue\n"
    "    expr = ' '.join(line.split()[:5]); name = line.split('#')[1].strip()\n"
    "    for t in runs(expr, start, 3): f.write(f'{name} {t}\\n')\nPY\npython3 /tmp/cron.py"
  )
  wrong = solve.replace("cw = (t.weekday() + 1) % 7", "cw = t.weekday()")
  check = """
got = lines("/workspace/schedule.txt")
if got != DATA["want"]:
  bad = next((i for i, (a, b) in enumerate(zip(got, DATA["want"])) if a != b), None)
  fail(f"schedule differs at line {bad}: {got[bad] if bad is not None else len(got)} vs {DATA['want'][bad] if bad is not None else len(DATA['want'])}")
"""  # noqa: E501 (embedded script, kept verbatim)
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"crontab": tab},
    data={"want": want},
    language="python",
    complexity=("short", "moderate", "moderate")[level],
  )


def group_members(rng: random.Random, level: int) -> TaskSpec:
  n = (8, 25, 80)[level]
  groups = {g: 2000 + i for i, g in enumerate(("staff", "devops", "audit", "backup", "web"))}
  target = rng.choice(sorted(groups))
  passwd = ["root:x:0:0:root:/root:/bin/bash", "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin"]
  members = {g: [] for g in groups}
  want = set()
  for i in range(n):
    u = f"{rng.choice(util.FIRST)}{i}"
    uid = rng.choice((rng.randint(100, 999), rng.randint(1000, 1999)))
    shell = rng.choice(("/bin/bash", "/bin/bash", "/usr/sbin/nologin", "/bin/false", "/bin/zsh"))
    pg = rng.choice(sorted(groups))
    passwd.append(f"{u}:x:{uid}:{groups[pg]}:{u.title()}:/home/{u}:{shell}")
    sup = [g for g in groups if g != pg and rng.random() < 0.3]
    for g in sup:
      members[g].append(u)
    if (
      uid >= 1000
      and shell not in ("/usr/sbin/nologin", "/bin/false")
      and (pg == target or target in sup)
    ):
      want.add(u)
  u = f"zz{rng.randint(0, 99)}"  # a login user in the group only through its primary gid
  passwd.append(f"{u}:x:1500:{groups[target]}:Z:/home/{u}:/bin/bash")
  want.add(u)
  group = [f"{g}:x:{gid}:{','.join(members[g])}" for g, gid in groups.items()]
  instruction = f"""/workspace/etc contains a snapshot of passwd and group from a server. List every
login account (uid >= 1000 and a shell other than /usr/sbin/nologin and /bin/false) that is a member
of group `{target}`, either as its primary group or as a supplementary member. Write the user names,
sorted, one per line, to /workspace/answer.txt."""
  solve = f"""gid=$(awk -F: '$1=="{target}" {{print $3}}' etc/group)
{{ awk -F: -v g="$gid" '$4==g {{print $1}}' etc/passwd; awk -F: '$1=="{target}" {{print $4}}' etc/group | tr ',' '\\n'; }} | sort -u > /tmp/m
awk -F: '$3>=1000 && $7!="/usr/sbin/nologin" && $7!="/bin/false" {{print $1}}' etc/passwd | sort > /tmp/l
comm -12 /tmp/m /tmp/l > answer.txt"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = f"""awk -F: '$1=="{target}" {{print $4}}' etc/group | tr ',' '\\n' | grep . | sort > /tmp/m
awk -F: '$3>=1000 && $7!="/usr/sbin/nologin" && $7!="/bin/false" {{print $1}}' etc/passwd | sort > /tmp/l
comm -12 /tmp/m /tmp/l > answer.txt"""  # noqa: E501 (embedded script, kept verbatim)
  check = """
if lines("/workspace/answer.txt") != DATA["want"]:
  fail(f"answer {lines('/workspace/answer.txt')[:5]} != {DATA['want'][:5]}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"etc/passwd": "\n".join(passwd) + "\n", "etc/group": "\n".join(group) + "\n"},
    data={"want": sorted(want)},
  )


CLEANUP_CHECK = """
import os, random, shutil, time
rng = random.Random(DATA["seed"])
now = time.time()
for trial in range(DATA["n"]):
  root = f"/tmp/cleanup_trial_{trial}"
  shutil.rmtree(root, ignore_errors=True)
  files = []
  for d in ("", "a", "a/b", "keep", "c"):
    os.makedirs(os.path.join(root, d), exist_ok=True)
    for i in range(rng.randint(0, 6)):
      name = os.path.join(root, d, f"f{i}." + rng.choice(("log", "log", "txt", "gz")))
      open(name, "w").write("x")
      age = (rng.choice((0.5, 3, DATA["days"] - 0.3, DATA["days"] + 0.3, 20, 40)) + rng.uniform(0, 0.1)) * 86400
      os.utime(name, (now - age, now - age))
      files.append((name, age))
  expect = set()
  by_dir = {}
  for name, age in files:
    by_dir.setdefault(os.path.dirname(name), []).append((age, name))
  for d, items in by_dir.items():
    logs = sorted(a for a in items if a[1].endswith(".log"))
    newest = {n for _, n in logs[:DATA["keep_newest"]]}
    for age, name in items:
      protected = "/keep" in d[len(root):] or name in newest or not name.endswith(".log")
      if protected or age <= DATA["days"] * 86400:
        expect.add(name)
  code, out = sh(f"bash /workspace/cleanup.sh {root}", timeout=60)
  left = {os.path.join(r, n) for r, _, ns in os.walk(root) for n in ns}
  if left != expect:
    fail(f"trial {trial}: removed {sorted(expect - left)[:3]}, kept {sorted(left - expect)[:3]} (exit {code})")
"""  # noqa: E501 (embedded script, kept verbatim)


def log_cleanup(rng: random.Random, level: int) -> TaskSpec:
  days, keep = rng.choice((5, 7, 14)), (0, 1, 2)[level]
  keep_rule = (
    f"\n- in every directory, always keep the {keep} most recently modified `*.log` files"
    if keep
    else ""
  )
  instruction = f"""Write /workspace/cleanup.sh: `bash cleanup.sh DIR` must delete, recursively
under DIR, every file named `*.log` whose modification time is more than {days} days ago, except:
- never touch anything inside a directory named `keep` (at any depth){keep_rule}
- other files are never deleted.
It will be run on several hidden directory trees."""
  solve = f"""cat > cleanup.sh <<'SH'
#!/bin/bash
python3 - "$1" <<'PY'
import os, sys, time
root, now = sys.argv[1], time.time()
for d, subdirs, names in os.walk(root):
  if 'keep' in os.path.relpath(d, root).split(os.sep):
    continue
  logs = sorted((now - os.path.getmtime(os.path.join(d, n)), n) for n in names if n.endswith('.log'))
  for age, n in logs[{keep}:]:
    if age > {days} * 86400:
      os.remove(os.path.join(d, n))
PY
SH"""  # noqa: E501 (embedded script, kept verbatim)
  # find's -mtime counts whole days (and ignores the keep-newest rule): both are traps
  wrong = f"""cat > cleanup.sh <<'SH'
#!/bin/bash
find "$1" -name '*.log' -mtime +{days} -not -path '*/keep/*' -delete
SH"""
  return TaskSpec(
    instruction,
    CLEANUP_CHECK,
    solve,
    wrong,
    data={
      "seed": rng.randint(0, 2**31),
      "n": (5, 15, 40)[level],
      "days": days,
      "keep_newest": keep,
    },
    complexity=("short", "moderate", "moderate")[level],
  )


def sshd_hardening(rng: random.Random, level: int) -> TaskSpec:
  req = [
    ("PermitRootLogin", "no"),
    ("PasswordAuthentication", "no"),
    ("X11Forwarding", "no"),
    ("MaxAuthTries", str(rng.randint(2, 4))),
    ("ClientAliveInterval", str(rng.choice((120, 300)))),
    ("AllowTcpForwarding", "no"),
  ][: (2, 4, 6)[level]]
  port = rng.choice((22, 2222, 2200))
  base = [
    f"Port {port}",
    "PermitRootLogin yes",
    "PasswordAuthentication yes",
    "X11Forwarding yes",
    "MaxAuthTries 6",
    "UsePAM yes",
    "Subsystem sftp /usr/lib/openssh/sftp-server",
  ]
  if level >= 2:
    base += ["", "Match User backup", "  PasswordAuthentication yes"]
  instruction = (
    """Harden /workspace/sshd_config. Its effective global settings (sshd uses the FIRST value
it reads for a keyword; settings after a `Match` line only apply to that match) must be:
"""
    + "".join(f"- {k} {v}\n" for k, v in req)
    + f"""Keep Port {port} and every other existing setting (including any Match block) as is."""
  )
  sets = "; ".join(f"s/^#\\?{k} .*/{k} {v}/" for k, v in req)
  solve = f"""sed -i '{sets}' sshd_config
python3 - <<'PY'
req = {req!r}
lines = open('sshd_config').read().splitlines()
stop = next((i for i, l in enumerate(lines) if l.lower().startswith('match ')), len(lines))
have = {{l.split()[0].lower() for l in lines[:stop] if l.strip()}}
add = [f'{{k}} {{v}}' for k, v in req if k.lower() not in have]
lines[stop:stop] = add
open('sshd_config', 'w').write('\\n'.join(lines) + '\\n')
PY"""
  wrong = "cat >> sshd_config <<'EOF'\n" + "".join(f"{k} {v}\n" for k, v in req) + "EOF"
  check = """
eff = {}
for l in read("/workspace/sshd_config").splitlines():
  w = l.split()
  if not w or w[0].startswith("#"):
    continue
  if w[0].lower() == "match":
    break
  eff.setdefault(w[0].lower(), " ".join(w[1:]))
for k, v in DATA["req"] + [["Port", str(DATA["port"])], ["UsePAM", "yes"]]:
  if eff.get(k.lower()) != v:
    fail(f"effective {k} is {eff.get(k.lower())!r}, expected {v!r}")
if DATA["match"] and "Match User backup" not in read("/workspace/sshd_config"):
  fail("the Match block was removed")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"sshd_config": "\n".join(base) + "\n"},
    data={"req": [list(r) for r in req], "port": port, "match": level >= 2},
  )


FAMILIES = (
  Family(
    "cron_next_runs", "system_administration", "exact_text", "text_only", cron_next, ("cron",)
  ),
  Family(
    "group_members",
    "system_administration",
    "exact_text",
    "text_only",
    group_members,
    ("accounts",),
  ),
  Family(
    "log_cleanup_script",
    "system_administration",
    "fuzz_equivalence",
    "text_only",
    log_cleanup,
    ("find",),
  ),
  Family("sshd_hardening", "security", "exact_text", "text_only", sshd_hardening, ("config",)),
)
