"""security families: input filters graded on hidden adversarial corpora, and secret scanning."""

from __future__ import annotations

import dataclasses
import random
import re
import urllib.parse

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec

CORPUS_CHECK = """
items, labels = DATA["items"], DATA["labels"]
code, out = sh("python3 /workspace/filter.py", input="".join(i + "\\n" for i in items), timeout=120)
got = out.split()
if len(got) != len(items):
  fail(f"filter.py printed {len(got)} verdicts for {len(items)} lines (exit {code})")
missed = [i for i, g, l in zip(items, got, labels) if l == "REJECT" and g != "REJECT"]
blocked = [i for i, g, l in zip(items, got, labels) if l == "ACCEPT" and g != "ACCEPT"]
print(f"malicious let through: {len(missed)}, benign blocked: {len(blocked)}")
if missed or blocked:
  fail(f"let through {missed[:3]}, blocked {blocked[:3]}")
"""


def _corpus_task(rng, level, instruction, classify, bad_gens, good_gens, solve, wrong):
  """A balanced hidden corpus (every generator used at least once) and a small public sample."""
  n = (20, 80, 300)[level]
  items = [g(rng) for g in bad_gens] + [g(rng) for g in good_gens]
  while len(items) < n:
    items.append(rng.choice(bad_gens + good_gens)(rng))
  items = list(dict.fromkeys(items))
  rng.shuffle(items)
  labels = [classify(i) for i in items]
  sample = [g(rng) for g in rng.sample(bad_gens, 2) + rng.sample(good_gens, 2)]
  files = {"examples.txt": "".join(f"{classify(s)}\t{s}\n" for s in sample)}
  instruction += (
    "\n\nWrite /workspace/filter.py: it reads one item per line from stdin and prints one "
    "verdict per line, ACCEPT or REJECT. /workspace/examples.txt shows a few labelled "
    "examples. A hidden corpus of malicious and benign items will be used; every malicious "
    "item must be rejected and every benign one accepted."
  )
  return TaskSpec(
    instruction,
    CORPUS_CHECK,
    solve,
    wrong,
    files=files,
    data={"items": items, "labels": labels},
    language="python",
  )


def _path_verdict(p: str) -> str:
  prev = None
  while prev != p:
    prev, p = p, urllib.parse.unquote(p)
  if not p or "\x00" in p or "\\" in p or p.startswith("/") or ".." in p.split("/"):
    return "REJECT"
  return "ACCEPT"


PATH_SOLVE = """cat > filter.py <<'PY'
import sys, urllib.parse
for line in sys.stdin:
  p, prev = line.rstrip('\\n'), None
  while prev != p:
    prev, p = p, urllib.parse.unquote(p)
  bad = not p or '\\x00' in p or '\\\\' in p or p.startswith('/') or '..' in p.split('/')
  print('REJECT' if bad else 'ACCEPT')
PY"""


def path_filter(rng: random.Random, level: int) -> TaskSpec:
  def w(r):
    return util.word(r)

  bad = [
    lambda r: f"../{w(r)}/passwd",
    lambda r: f"{w(r)}/../../{w(r)}",
    lambda r: f"%2e%2e/{w(r)}",
    lambda r: f"%252e%252e%252f{w(r)}",
    lambda r: f"/etc/{w(r)}",
    lambda r: f"{w(r)}\\..\\{w(r)}",
    lambda r: f"{w(r)}.png%00.php",
    lambda r: f"{w(r)}/%2E%2E%2F{w(r)}",
  ]
  good = [
    lambda r: f"img/{w(r)}..png",
    lambda r: f"docs/v1.{r.randint(0, 9)}/{w(r)}.md",
    lambda r: f"{w(r)}/{w(r)}%20{w(r)}.txt",
    lambda r: f"..{w(r)}",
    lambda r: f"{w(r)}/./{w(r)}",
    lambda r: f"{w(r)}-{r.randint(0, 99)}.txt",
  ]
  instruction = """Requested file paths arrive percent-encoded (possibly encoded several times). A
path is safe only if, after percent-decoding repeatedly until it no longer changes, it is non-empty,
is relative (does not start with `/`), contains no NUL byte and no backslash, and has no path
segment (split on `/`) equal to `..`. Names like `..hidden` or `a..b` are fine."""
  wrong = """cat > filter.py <<'PY'
import sys
for line in sys.stdin:
  p = line.rstrip('\\n')
  print('REJECT' if '../' in p or p.startswith('/') else 'ACCEPT')
PY"""
  return _corpus_task(rng, level, instruction, _path_verdict, bad, good, PATH_SOLVE, wrong)


def _pw_rules(level):
  return {"min_len": (8, 10, 12)[level], "classes": (2, 3, 4)[level]}


def password_policy(rng: random.Random, level: int) -> TaskSpec:
  rules = _pw_rules(level)
  common = sorted({util.word(rng).title() + str(rng.randint(10, 99)) + "!" for _ in range(8)})

  def verdict(item):
    user, pw = item.split(" ", 1)
    classes = sum(
      any(f(c) for c in pw)
      for f in (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum())
    )
    if (
      len(pw) < rules["min_len"]
      or classes < rules["classes"]
      or user.lower() in pw.lower()
      or re.search(r"(.)\1\1", pw)
      or pw.lower() in {c.lower() for c in common}
    ):
      return "REJECT"
    return "ACCEPT"

  sym = "!@#$%^&*"

  def strong(r):
    s = [
      r.choice("abcdefghijkmnpqrstuvwxyz"),
      r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ"),
      r.choice("23456789"),
      r.choice(sym),
    ] + [r.choice("abcdefghijkmnpqrstuvwxyz23456789") for _ in range(rules["min_len"])]
    r.shuffle(s)
    return "".join(s)

  def cap(s):  # no character three times in a row
    return re.sub(r"(.)\1\1+", lambda m: m.group(1) * 2, s)

  def u(r):
    return r.choice(util.FIRST) + str(r.randint(1, 9))

  bad = [
    lambda r: (lambda n: f"{n} {cap(strong(r))}{n.upper()}")(u(r)),
    lambda r: f"{u(r)} {cap(strong(r))[: rules['min_len'] - 1]}",
    lambda r: f"{u(r)} {cap(strong(r))}aaa",
    lambda r: f"{u(r)} {r.choice(common).lower()}",
    lambda r: f"{u(r)} {'x' * (rules['min_len'] + 2)}",
  ]
  good = [lambda r: f"{u(r)} {cap(strong(r))}", lambda r: f"{u(r)} {cap(strong(r))}{r.choice(sym)}"]
  files_common = "".join(c + "\n" for c in common)
  instruction = f"""Write a password policy checker. Each input line is `<username> <password>`.
Accept the password only if ALL hold:
- at least {rules["min_len"]} characters
- at least {rules["classes"]} of the 4 character classes: lower case, upper case, digit, other
  symbol
- it does not contain the username (compared case-insensitively)
- no character appears 3 or more times in a row
- it is not in /workspace/common.txt (compared case-insensitively)
ACCEPT a password that satisfies the policy and REJECT one that does not."""
  solve = f"""cat > filter.py <<'PY'
import re, sys
common = {{l.strip().lower() for l in open('/workspace/common.txt') if l.strip()}}
for line in sys.stdin:
  user, pw = line.rstrip('\\n').split(' ', 1)
  classes = sum(any(f(c) for c in pw) for f in (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum()))
  bad = (len(pw) < {rules["min_len"]} or classes < {rules["classes"]} or user.lower() in pw.lower()
         or re.search(r'(.)\\1\\1', pw) or pw.lower() in common)
  print('REJECT' if bad else 'ACCEPT')
PY"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = solve.replace("user.lower() in pw.lower()", "user in pw")
  spec = _corpus_task(rng, level, instruction, verdict, bad, good, solve, wrong)
  return dataclasses.replace(spec, files={**spec.files, "common.txt": files_common})


def _url_verdict(allowed):
  def verdict(u):
    try:
      p = urllib.parse.urlsplit(u)
      port = p.port
    except ValueError:
      return "REJECT"
    host = p.hostname or ""
    ok = (
      p.scheme == "https"
      and port in (None, 443)
      and any(host == d or host.endswith("." + d) for d in allowed)
    )
    return "ACCEPT" if ok else "REJECT"

  return verdict


def url_allowlist(rng: random.Random, level: int) -> TaskSpec:
  allowed = sorted(
    {f"{util.word(rng)}.{rng.choice(('com', 'org', 'io'))}" for _ in range((1, 2, 3)[level])}
  )

  def d(r):
    return r.choice(allowed)

  def w(r):
    return util.word(r)

  bad = [
    lambda r: f"https://{d(r)}.{w(r)}.net/",
    lambda r: f"https://{w(r)}.net/?next={d(r)}",
    lambda r: f"https://{d(r)}@{w(r)}.net/x",
    lambda r: f"http://{d(r)}/{w(r)}",
    lambda r: f"https://not{d(r)}/",
    lambda r: f"https://{d(r)}:8443/",
    lambda r: f"https://{w(r)}.net/{d(r)}",
  ]
  good = [
    lambda r: f"https://{d(r)}/{w(r)}",
    lambda r: f"https://{w(r)}.{d(r)}/x?y={r.randint(0, 9)}",
    lambda r: f"https://{d(r).upper()}/",
    lambda r: f"https://{d(r)}:443/{w(r)}",
  ]
  instruction = f"""Write a URL allowlist for a redirect endpoint. Allowed domains:
{", ".join(allowed)}. A URL is allowed only if its scheme is https, its port is absent or 443, and
its host (parsed as a URL host: user info before `@` is not the host; compare case-insensitively)
equals an allowed domain or is a subdomain of one. Anything else, including unparsable URLs, is
rejected. ACCEPT allowed URLs."""
  solve = f"""cat > filter.py <<'PY'
import sys, urllib.parse
allowed = {allowed!r}
for line in sys.stdin:
  u = line.rstrip('\\n')
  try:
    p = urllib.parse.urlsplit(u); port = p.port
  except ValueError:
    print('REJECT'); continue
  h = p.hostname or ''
  ok = p.scheme == 'https' and port in (None, 443) and any(h == d or h.endswith('.' + d) for d in allowed)
  print('ACCEPT' if ok else 'REJECT')
PY"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = f"""cat > filter.py <<'PY'
import sys
allowed = {allowed!r}
for line in sys.stdin:
  u = line.rstrip('\\n').lower()
  print('ACCEPT' if u.startswith('https://') and any(d in u for d in allowed) else 'REJECT')
PY"""
  return _corpus_task(rng, level, instruction, _url_verdict(allowed), bad, good, solve, wrong)


def secret_scan(rng: random.Random, level: int) -> TaskSpec:
  files, want = {}, []
  up = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
  secret = {
    "aws": lambda: "AKIA" + util.token(rng, 16, up),
    "gh": lambda: "ghp_" + util.token(rng, 36, up + "abcdefghijk"),
    "pem": lambda: "-----BEGIN RSA PRIVATE KEY-----",
  }
  paths = [f"src/{util.word(rng)}_{i}.py" for i in range((4, 12, 30)[level])] + [
    ".env",
    "config/.secrets.yml",
  ]
  for p in paths:
    lines = [f"{util.ident(rng)} = {rng.randint(0, 99)}" for _ in range(rng.randint(5, 30))]
    if p.startswith(".") or p.startswith("config") or rng.random() < 0.4:
      k = rng.choice(list(secret))
      at = rng.randrange(len(lines))
      lines[at] = f'key = "{secret[k]()}"' if k != "pem" else secret[k]()
      want.append(f"{p}:{at + 1}")
    if rng.random() < 0.3:  # decoys: documented example keys that are too short
      lines.append("example = 'AKIAEXAMPLE' # not a key")
    files[f"repo/{p}"] = "\n".join(lines) + "\n"
  want.sort()
  instruction = """Audit /workspace/repo for leaked credentials: AWS access key ids (`AKIA` followed
by exactly 16 characters A-Z or 2-7), GitHub tokens (`ghp_` followed by 36 letters/digits) and PEM
private key headers (`-----BEGIN ... PRIVATE KEY-----`). Include hidden files. Write every finding
as `<path relative to repo>:<line number>` to /workspace/findings.txt, one per line, sorted
(LC_ALL=C)."""
  pat = r"AKIA[A-Z2-7]{16}|ghp_[A-Za-z0-9]{36}|-----BEGIN [A-Z ]*PRIVATE KEY-----"
  solve = (
    f"cd repo && grep -rnoE '{pat}' . | cut -d: -f1,2 | sed 's|^\\./||' "
    "| LC_ALL=C sort -u > /workspace/findings.txt"
  )
  wrong = (
    f"cd repo && grep -rnoE '{pat}' * | cut -d: -f1,2 | LC_ALL=C sort -u > /workspace/findings.txt"
  )
  check = """
got = lines("/workspace/findings.txt")
if got != DATA["want"]:
  fail(f"findings {got[:4]} != {DATA['want'][:4]} ({len(got)} vs {len(DATA['want'])})")
"""
  return TaskSpec(instruction, check, solve, wrong, files=files, data={"want": want})


FAMILIES = (
  Family(
    "path_traversal_filter",
    "security",
    "adversarial_corpus",
    "text_only",
    path_filter,
    ("web security",),
  ),
  Family(
    "password_policy", "security", "adversarial_corpus", "text_only", password_policy, ("auth",)
  ),
  Family(
    "url_allowlist", "security", "adversarial_corpus", "text_only", url_allowlist, ("web security",)
  ),
  Family("secret_scan", "security", "exact_text", "text_only", secret_scan, ("grep", "audit")),
)
