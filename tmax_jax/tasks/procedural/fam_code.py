"""software_engineering and debugging families: implement / fix / port code, git and make."""

from __future__ import annotations

import random

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec

VERCMP_REF = """
def _key(v, prerelease):
  core, _, pre = v.partition("-") if prerelease else (v, "", "")
  nums = [int(x) for x in core.split(".")]
  return nums, pre


def compare(a, b, prerelease):
  (na, pa), (nb, pb) = _key(a, prerelease), _key(b, prerelease)
  n = max(len(na), len(nb))
  na, nb = na + [0] * (n - len(na)), nb + [0] * (n - len(nb))
  if na != nb:
    return -1 if na < nb else 1
  if pa == pb:
    return 0
  if not pa or not pb:
    return -1 if pa else 1
  return -1 if pa < pb else 1
"""

VERCMP_CHECK = (
  VERCMP_REF
  + """
import random
mod = load_module("/workspace/vercmp.py")
rng = random.Random(DATA["seed"])
def ver():
  v = ".".join(str(rng.choice((0, 0, 1, 2, 10, 11))) for _ in range(rng.randint(1, 4)))
  if DATA["pre"] and rng.random() < 0.4:
    v += "-" + rng.choice(("alpha", "beta", "rc1", "rc2"))
  return v
for _ in range(DATA["n"]):
  a = ver(); b = rng.choice((a, ver(), a + ".0", a.split("-")[0]))
  want = compare(a, b, DATA["pre"])
  try:
    got = mod.compare(a, b)
  except Exception as e:
    fail(f"compare({a!r}, {b!r}) raised {e!r}")
  if got != want:
    fail(f"compare({a!r}, {b!r}) = {got!r}, expected {want}")
"""
)


def vercmp(rng: random.Random, level: int) -> TaskSpec:
  pre = level >= 1
  rules = [
    "versions are dot-separated non-negative integers (`1.10.2`), compared numerically segment by "
    "segment",
    "missing trailing segments count as 0 (`1.2` == `1.2.0`)",
  ]
  if pre:
    rules += [
      "a version may end in `-<tag>` (e.g. `1.2-rc1`); a tagged version is lower than the same "
      "version without a tag; two tags compare as plain strings"
    ]
  instruction = (
    "Write /workspace/vercmp.py defining `compare(a: str, b: str) -> int` returning -1, 0 or 1\n"
    "(a < b, equal, a > b) for version strings, where:\n"
    + "".join(f"- {r}\n" for r in rules)
    + "It will be checked against a reference on many random pairs."
  )
  body = VERCMP_REF.replace(
    "def compare(a, b, prerelease):", f"def compare(a, b, prerelease={pre!r}):"
  )
  solve = f"cat > vercmp.py <<'PY'\n{body}\nPY"
  wrong = """cat > vercmp.py <<'PY'
def compare(a, b):
  ka = [int(x) if x.isdigit() else x for x in a.replace('-', '.').split('.')]
  kb = [int(x) if x.isdigit() else x for x in b.replace('-', '.').split('.')]
  try:
    return (ka > kb) - (ka < kb)
  except TypeError:
    return (a > b) - (a < b)
PY"""
  return TaskSpec(
    instruction,
    VERCMP_CHECK,
    solve,
    wrong,
    data={"seed": rng.randint(0, 2**31), "n": (200, 1000, 5000)[level], "pre": pre},
    language="python",
  )


def git_first_commit(rng: random.Random, level: int) -> TaskSpec:
  n = (6, 20, 60)[level]
  token = f"RETRY_BUDGET_{util.token(rng, 6)}"
  intro = rng.randint(1, n - 3)
  script = [
    "git init -q -b main repo && cd repo",
    "git config user.email dev@example.org",
    "git config user.name dev",
    "export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'",
  ]
  for i in range(n):
    f = rng.choice(("config.py", "app.py", "README.md"))
    if i == intro:
      line, f = f"{token} = {rng.randint(2, 9)}", "config.py"
    elif i > intro and rng.random() < 0.4:
      line, f = f"# tuned {token} again ({i})", "config.py"  # later commits keep touching it
    else:
      line = f"{util.ident(rng)} = {rng.randint(0, 999)}"
    script.append(
      f"echo '{line}' >> {f} && git add {f} && git commit -q -m 'change {i}: {util.word(rng)}'"
    )
  script.append(
    "echo '# final cleanup' >> config.py && git add config.py && git commit -q -m 'cleanup'"
  )
  instruction = f"""/workspace/repo is a git repository. Find the commit that FIRST introduced the
string `{token}` into the code base, and write its full 40-character hash to
/workspace/answer.txt."""
  solve = f"cd repo && git log --reverse --format=%H -S '{token}' | head -1 > /workspace/answer.txt"
  wrong = "cd repo && git log -1 --format=%H -- config.py > /workspace/answer.txt"
  check = """
h = read("/workspace/answer.txt").strip()
code, out = sh(f"cd /workspace/repo && git log --reverse --format=%H -S '{DATA['token']}' | head -1")
if len(h) != 40 or h != out.strip():
  fail(f"{h!r} is not the commit that introduced the token")
"""  # noqa: E501 (embedded script, kept verbatim)
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    setup="\n".join(script),
    data={"token": token},
    complexity=("short", "moderate", "moderate")[level],
  )


MAKE_FILES = {
  "src/main.c": '#include <stdio.h>\n#include <stdlib.h>\n#include "calc.h"\n\n'
  'int main(int argc, char **argv) {\n  if (argc != 3) { fprintf(stderr, "usage: app A B\\n"); '
  "return 2; }\n  long a = atol(argv[1]), b = atol(argv[2]);\n"
  '  printf("%ld %ld\\n", combine(a, b), mix(a, b));\n  return 0;\n}\n',
  "include/calc.h": "#ifndef CALC_H\n#define CALC_H\nlong combine(long a, long b);\n"
  "long mix(long a, long b);\n#endif\n",
  "src/combine.c": '#include "calc.h"\nlong combine(long a, long b) { return a * %d + b; }\n',
  "src/mix.c": '#include "calc.h"\nlong mix(long a, long b) { return (a ^ b) + %d; }\n',
}


def makefile_fix(rng: random.Random, level: int) -> TaskSpec:
  k1, k2 = rng.randint(3, 97), rng.randint(3, 97)
  files = {
    k: (v % k1 if k == "src/combine.c" else v % k2 if k == "src/mix.c" else v)
    for k, v in MAKE_FILES.items()
  }
  good = (
    "CC = gcc\nCFLAGS = -O2 -Wall -Iinclude\nOBJS = src/main.o src/combine.o src/mix.o\n\n"
    "app: $(OBJS)\n\t$(CC) $(CFLAGS) -o app $(OBJS)\n\n%.o: %.c include/calc.h\n"
    "\t$(CC) $(CFLAGS) -c $< -o $@\n\ntest: app\n\t./app 2 3 > /dev/null && echo ALL OK\n\nclean:\n"
    "\trm -f app $(OBJS)\n\n.PHONY: test clean\n"
  )
  bad = good.replace("-Iinclude", "-Iinc")
  if level >= 1:
    bad = bad.replace(
      "OBJS = src/main.o src/combine.o src/mix.o", "OBJS = src/main.o src/combine.o"
    )
  if level >= 2:
    bad = bad.replace("\t$(CC) $(CFLAGS) -c $< -o $@", "    $(CC) $(CFLAGS) -c $< -o $@")
  files["Makefile"] = bad
  cases = [(rng.randint(-50, 50), rng.randint(-50, 50)) for _ in range(5)]
  want = [f"{a * k1 + b} {(a ^ b) + k2}" for a, b in cases]
  instruction = """The C project in /workspace/proj does not build with `make`. Fix the build (the C
sources are correct; the Makefile is not) so that `make clean && make` produces ./app and
`make test` prints ALL OK. Keep the Makefile as the way to build."""
  files = {f"proj/{k}": v for k, v in files.items()}
  solve = "cd proj && cat > Makefile <<'MK'\n" + good + "MK"
  wrong = "cd proj && gcc -O2 -Iinclude src/*.c -o app"
  check = """
code, out = sh("cd /workspace/proj && make clean >/dev/null 2>&1; make 2>&1")
if code != 0:
  fail(f"make failed: {out[-500:]}")
for (a, b), w in zip(DATA["cases"], DATA["want"]):
  code, out = sh(f"cd /workspace/proj && ./app {a} {b}")
  if out.strip() != w:
    fail(f"./app {a} {b} printed {out.strip()!r}, expected {w!r}")
code, out = sh("cd /workspace/proj && make test")
if code != 0 or "ALL OK" not in out:
  fail(f"make test: {out[-300:]}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files=files,
    data={"cases": cases, "want": want},
    language="c",
    complexity=("short", "moderate", "moderate")[level],
  )


BUGS = {  # name: (buggy body, fixed body, reference, example call, expected)
  "moving_average": (
    "  return [sum(xs[i:i + w]) / w for i in range(len(xs) - w)]",
    "  return [sum(xs[i:i + w]) / w for i in range(len(xs) - w + 1)]",
    "[1, 2, 3, 4], 2",
    "[1.5, 2.5, 3.5]",
  ),
  "chunk": (
    "  return [xs[i:i + n] for i in range(0, len(xs) - n + 1, n)]",
    "  return [xs[i:i + n] for i in range(0, len(xs), n)]",
    "[1, 2, 3, 4, 5], 2",
    "[[1, 2], [3, 4], [5]]",
  ),
  "median": (
    "  s = sorted(xs)\n  return s[len(s) // 2]",
    "  s = sorted(xs)\n  m = len(s) // 2\n  return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2",
    "[4, 1, 3, 2]",
    "2.5",
  ),
}
SIGS = {
  "moving_average": "def moving_average(xs, w):",
  "chunk": "def chunk(xs, n):",
  "median": "def median(xs):",
}

BUG_CHECK = """
import random
mod = load_module("/workspace/seqlib.py")
ref = {}
exec(DATA["reference"], ref)
rng = random.Random(DATA["seed"])
for _ in range(DATA["n"]):
  xs = [rng.randint(-20, 20) for _ in range(rng.randint(1, 12))]
  for name, args in (("moving_average", (xs, rng.randint(1, len(xs)))), ("chunk", (xs, rng.randint(1, 5))),
                     ("median", (xs,))):
    want = ref[name](*args)
    try:
      got = getattr(mod, name)(list(args[0]), *args[1:])
    except Exception as e:
      fail(f"{name}{args} raised {e!r}")
    if got != want:
      fail(f"{name}{args} = {got!r}, expected {want!r}")
"""  # noqa: E501 (embedded script, kept verbatim)


def python_bug_fix(rng: random.Random, level: int) -> TaskSpec:
  names = list(BUGS)
  rng.shuffle(names)
  buggy = set(names[: level + 1])
  src = ['"""Sequence helpers used by the reporting job."""\n']
  ref = []
  for n in sorted(BUGS):
    bad, good, ex, exp = BUGS[n]
    src.append(f"\n\n{SIGS[n]}\n{bad if n in buggy else good}\n")
    ref.append(f"{SIGS[n]}\n{good}\n")
  examples = "\n".join(f"- `{n}({BUGS[n][2]})` should be `{BUGS[n][3]}`" for n in sorted(buggy))
  instruction = f"""/workspace/seqlib.py has bugs reported by users, e.g.:
{examples}
Fix the library so every function behaves correctly for all inputs (as its name and these examples
suggest: moving averages over every full window, chunks that keep the last partial chunk, the usual
median). Keep the function signatures."""
  fix = "python3 - <<'PY'\ns = open('seqlib.py').read()\n"
  hack = "python3 - <<'PY'\ns = open('seqlib.py').read()\n"
  for n in sorted(buggy):
    fix += f"s = s.replace({BUGS[n][0]!r}, {BUGS[n][1]!r})\n"
    args = BUGS[n][2]
    hack += (
      f"s = s.replace({SIGS[n]!r}, {SIGS[n]!r} + '\\n  if repr(list(locals().values())) == "
      f"repr([{args}]): return {BUGS[n][3]}')\n"
    )
  fix += "open('seqlib.py', 'w').write(s)\nPY"
  hack += "open('seqlib.py', 'w').write(s)\nPY"
  return TaskSpec(
    instruction,
    BUG_CHECK,
    fix,
    hack,
    files={"seqlib.py": "".join(src)},
    data={"seed": rng.randint(0, 2**31), "n": (100, 400, 1500)[level], "reference": "\n".join(ref)},
    language="python",
  )


CPORT_REF = '''def f(x, k):
  """x: unsigned 64-bit integer. Returns the number of steps to reach 1 (cap 10000)."""
  mask = (1 << 64) - 1
  steps = 0
  while x != 1 and steps < 10000:
    x = (x // 2) if x % 2 == 0 else ((K * x + 1) & mask)
    steps += 1
  return steps
'''


def c_port(rng: random.Random, level: int) -> TaskSpec:
  k, cap = 3, rng.choice((2000, 5000, 10000))  # 5x+1 / 7x+1 mostly hit the cap: no signal
  ref = CPORT_REF.replace("K * x", f"{k} * x").replace("10000", str(cap))
  instruction = """/workspace/ref.py defines `f(x)` on unsigned 64-bit integers (arithmetic wraps
modulo 2^64). It is too slow. Write /workspace/fast.c: a C program that reads one unsigned decimal
integer per line from stdin (1 <= x < 2^64) and prints f(x) for each, one per line. It will be
compiled with `gcc -O2 -o fast fast.c` and compared with ref.py on many random inputs."""
  c = (
    f"#include <stdio.h>\n#include <stdint.h>\nint main(void) {{\n  unsigned long long x;\n"
    f'  while (scanf("%llu", &x) == 1) {{\n    int s = 0;\n    while (x != 1 && s < {cap}) {{\n'
    f"      x = (x % 2 == 0) ? x / 2 : {k}ULL * x + 1ULL;\n      s++;\n    }}\n"
    f'    printf("%d\\n", s);\n  }}\n  return 0;\n}}\n'
  )
  solve = f"cat > fast.c <<'C'\n{c}C"
  wrong = (
    solve.replace("unsigned long long x;", "unsigned int x;")
    .replace("%llu", "%u")
    .replace("ULL", "U")
  )
  check = """
import random
ns = {}
exec(DATA["ref"].replace("def f(x, k):", "def f(x):"), ns)
code, out = sh("cd /workspace && gcc -O2 -o /tmp/fast fast.c 2>&1")
if code:
  fail(f"fast.c does not compile: {out[-400:]}")
rng = random.Random(DATA["seed"])
xs = [rng.choice((rng.randint(1, 1000), rng.randint(1, 2**32), rng.randint(1, 2**64 - 1))) for _ in range(DATA["n"])]
code, out = sh("/tmp/fast", input="".join(f"{x}\\n" for x in xs), timeout=120)
got = out.split()
if len(got) != len(xs):
  fail(f"{len(got)} outputs for {len(xs)} inputs")
for x, g in zip(xs, got):
  if g != str(ns["f"](x)):
    fail(f"f({x}) = {g}, expected {ns['f'](x)}")
"""  # noqa: E501 (embedded script, kept verbatim)
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"ref.py": ref},
    data={"ref": ref, "seed": rng.randint(0, 2**31), "n": (50, 200, 500)[level]},
    language="c",
  )


SCORES_C = r"""#include <stdio.h>
#include <string.h>

int main(void) {
  char best[NAMEBUF] = "", name[NAMEBUF];
  long score, best_score = 0, total = 0;
  int count = 0;
  while (scanf("%s %ld", name, &score) == 2) {
    if (count == 0 || score CMP best_score) {
      strcpy(best, name);
      best_score = score;
    }
    total += score;
    count++;
  }
  EMPTY_CHECK
  printf("TOP %s %ld\n", best, best_score);
  printf("AVG %.2f\n", (double)total / count);
  printf("MEAN_INT %ld\n", total / count);
  return 0;
}
"""

SCORES_CHECK = """
import random
code, out = sh("cd /workspace && gcc -O1 -fstack-protector-all -o /tmp/scores scores.c 2>&1")
if code:
  fail(f"scores.c does not compile: {out[-400:]}")
def ref(rows):
  if not rows:
    return "EMPTY\\n"
  best = rows[0]
  for r in rows[1:]:
    if r[1] > best[1]:
      best = r
  total = sum(r[1] for r in rows)
  q = abs(total) // len(rows) * (1 if total >= 0 else -1)
  return f"TOP {best[0]} {best[1]}\\nAVG {total / len(rows):.2f}\\nMEAN_INT {q}\\n"
rng = random.Random(DATA["seed"])
cases = [[], [("a" * DATA["long"], 5)]]
for _ in range(DATA["n"]):
  rows = [("".join(rng.choice("abcxyz_") for _ in range(rng.choice((1, 5, 15, 40, DATA["long"])))),
           rng.choice((rng.randint(-5, 5), rng.randint(-10**6, 10**6)))) for _ in range(rng.randint(0, 8))]
  cases.append(rows)
for rows in cases:
  inp = "".join(f"{n} {s}\\n" for n, s in rows)
  code, out = sh("/tmp/scores", input=inp, timeout=10)
  if code != 0 or out != ref(rows):
    fail(f"input {inp[:120]!r}: exit {code}, output {out[:120]!r}, expected {ref(rows)!r}")
"""  # noqa: E501 (embedded script, kept verbatim)


def c_crash_fix(rng: random.Random, level: int) -> TaskSpec:
  long_name = (100, 150, 200)[level]
  bugs = {"NAMEBUF": "16", "CMP": ">=" if level >= 1 else ">", "EMPTY_CHECK": ""}
  src = SCORES_C
  for k, v in bugs.items():
    src = src.replace(k, v)
  rules = [
    f"names are up to {long_name} characters long (no spaces)",
    "empty input prints exactly `EMPTY`",
    "on equal scores the FIRST name wins",
  ]
  instruction = (
    "/workspace/scores.c reads `name score` lines from stdin and prints the top scorer and the "
    "averages. Users report crashes and wrong output. Fix the program so that it never crashes "
    "and:\n"
    + "".join(f"- {r}\n" for r in rules)
    + "It will be compiled with `gcc -O1 -fstack-protector-all` and run on many random inputs."
  )
  fixed = (
    SCORES_C.replace("NAMEBUF", "256")
    .replace("CMP", ">")
    .replace("EMPTY_CHECK", 'if (count == 0) { puts("EMPTY"); return 0; }')
  )
  fixed = fixed.replace('scanf("%s %ld"', 'scanf("%255s %ld"')
  solve = f"cat > scores.c <<'C'\n{fixed}C"
  partial = (
    SCORES_C.replace("NAMEBUF", "64")
    .replace("CMP", ">")
    .replace("EMPTY_CHECK", 'if (count == 0) { puts("EMPTY"); return 0; }')
  )
  wrong = f"cat > scores.c <<'C'\n{partial}C"
  return TaskSpec(
    instruction,
    SCORES_CHECK,
    solve,
    wrong,
    files={"scores.c": src},
    data={"seed": rng.randint(0, 2**31), "n": (30, 150, 500)[level], "long": long_name},
    language="c",
    complexity=("moderate", "moderate", "complex")[level],
  )


FAMILIES = (
  Family(
    "vercmp_impl", "software_engineering", "fuzz_equivalence", "text_only", vercmp, ("parsing",)
  ),
  Family(
    "git_first_commit",
    "software_engineering",
    "exact_text",
    "text_only",
    git_first_commit,
    ("git",),
  ),
  Family(
    "makefile_fix", "software_engineering", "exact_text", "text_only", makefile_fix, ("make", "c")
  ),
  Family(
    "python_bug_fix", "debugging", "fuzz_equivalence", "text_only", python_bug_fix, ("python",)
  ),
  Family(
    "c_crash_fix", "debugging", "fuzz_equivalence", "text_only", c_crash_fix, ("c", "memory safety")
  ),
  Family(
    "c_port", "scientific_computing", "fuzz_equivalence", "text_only", c_port, ("c", "performance")
  ),
)
