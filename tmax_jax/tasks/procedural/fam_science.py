"""data_science and scientific_computing families, graded by metric thresholds or fuzzing."""

from __future__ import annotations

import math
import random

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec


def stats_summary(rng: random.Random, level: int) -> TaskSpec:
  n, tol = (20, 300, 3000)[level], (1e-3, 1e-6, 1e-9)[level]
  cols = [util.word(rng) + f"_{i}" for i in range((2, 3, 5)[level])]
  data = {
    c: [round(rng.gauss(rng.uniform(-50, 50), rng.uniform(1, 20)), 4) for _ in range(n)]
    for c in cols
  }
  body = (
    ",".join(cols)
    + "\n"
    + "".join(",".join(str(data[c][i]) for c in cols) + "\n" for i in range(n))
  )
  want = {}
  for c, v in data.items():
    m = math.fsum(v) / n
    s = sorted(v)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    want[c] = {"mean": m, "median": med, "std": math.sqrt(math.fsum((x - m) ** 2 for x in v) / n)}
  instruction = f"""For every column of /workspace/samples.csv compute the mean, the median and the
POPULATION standard deviation (divide by n). Write /workspace/stats.json as
{{"<column>": {{"mean": ..., "median": ..., "std": ...}}, ...}}. Each number must be within a
relative error of {tol:g} of the exact value."""
  solve = """python3 - <<'PY'
import csv, json, statistics
rows = list(csv.DictReader(open('samples.csv')))
out = {}
for c in rows[0]:
  v = [float(r[c]) for r in rows]
  out[c] = {'mean': statistics.fmean(v), 'median': statistics.median(v), 'std': statistics.pstdev(v)}
json.dump(out, open('stats.json', 'w'))
PY"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = solve.replace("statistics.pstdev", "statistics.stdev")
  check = """
import json, math
try:
  got = json.load(open("/workspace/stats.json"))
except Exception as e:
  fail(f"stats.json unreadable: {e}")
for c, ws in DATA["want"].items():
  for k, w in ws.items():
    g = got.get(c, {}).get(k)
    if not isinstance(g, (int, float)) or abs(g - w) > DATA["tol"] * max(1.0, abs(w)):
      fail(f"{c}.{k}: {g} vs {w}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"samples.csv": body},
    data={"want": want, "tol": tol},
    language="python",
  )


def _table(names, rows) -> str:
  return (
    ",".join(names)
    + "\n"
    + "".join(
      ",".join(f"{x:.6f}" if isinstance(x, float) else str(x) for x in r) + "\n" for r in rows
    )
  )


LINREG_SOLVE = """python3 - <<'PY'
import csv
tr = list(csv.reader(open('train.csv')))
feats = [c for c in tr[0] if c != 'y']
X = [[1.0] + [float(r[tr[0].index(f)]) for f in feats] for r in tr[1:]]
Y = [float(r[tr[0].index('y')]) for r in tr[1:]]
k = len(X[0])
A = [[sum(x[i] * x[j] for x in X) for j in range(k)] + [sum(x[i] * y for x, y in zip(X, Y))] for i in range(k)]
for i in range(k):
  p = max(range(i, k), key=lambda r: abs(A[r][i])); A[i], A[p] = A[p], A[i]
  for r in range(k):
    if r != i:
      f = A[r][i] / A[i][i]
      A[r] = [a - f * b for a, b in zip(A[r], A[i])]
w = [A[i][k] / A[i][i] for i in range(k)]
te = list(csv.reader(open('test.csv')))
with open('predictions.csv', 'w') as f:
  f.write('y\\n')
  for r in te[1:]:
    x = [1.0] + [float(r[te[0].index(c)]) for c in feats]
    f.write(f'{sum(a * b for a, b in zip(w, x)):.6f}\\n')
PY"""  # noqa: E501 (embedded script, kept verbatim)


def linreg(rng: random.Random, level: int) -> TaskSpec:
  k, n, thr = (3, 5, 8)[level], (60, 300, 1500)[level], (0.9, 0.95, 0.97)[level]
  w = [rng.choice((-1, 1)) * rng.uniform(1, 3) for _ in range(k)]
  b = rng.uniform(-5, 5)
  names = [f"x{i}" for i in range(k)]

  def rows(m, with_y):
    out = []
    for _ in range(m):
      x = [rng.gauss(0, 1) for _ in range(k)]
      y = b + sum(a * c for a, c in zip(w, x, strict=True)) + rng.gauss(0, 0.2)
      out.append(x + [y] if with_y else x)
    return out

  train, test = rows(n, True), rows(n // 2 + 20, True)
  instruction = f"""/workspace/train.csv has features {", ".join(names)} and a target y;
/workspace/test.csv has the same features without y. Fit a model on train.csv and write
/workspace/predictions.csv: header `y`, then one prediction per test row, in order. The hidden
grader requires R^2 >= {thr} on the true test targets."""
  wrong = LINREG_SOLVE.replace("feats = [c for c in tr[0] if c != 'y']", "feats = [tr[0][0]]")
  check = """
ys = DATA["y"]
got = lines("/workspace/predictions.csv")
if not got or got[0] != "y" or len(got) != len(ys) + 1:
  fail(f"predictions.csv needs a header y and {len(ys)} rows, has {len(got)} lines")
try:
  p = [float(x) for x in got[1:]]
except ValueError as e:
  fail(f"bad number: {e}")
m = sum(ys) / len(ys)
r2 = 1 - sum((a - b) ** 2 for a, b in zip(ys, p)) / sum((a - m) ** 2 for a in ys)
print("R2", r2)
if not r2 >= DATA["thr"]:
  fail(f"R^2 {r2:.4f} < {DATA['thr']}")
"""
  return TaskSpec(
    instruction,
    check,
    LINREG_SOLVE,
    wrong,
    files={
      "train.csv": _table(names + ["y"], train),
      "test.csv": _table(names, [r[:-1] for r in test]),
    },
    data={"y": [r[-1] for r in test], "thr": thr},
    language="python",
    complexity=("moderate", "moderate", "complex")[level],
  )


CLASSIFY_SOLVE = """python3 - <<'PY'
import csv
tr = list(csv.DictReader(open('train.csv')))
feats = [c for c in tr[0] if c != 'label']
cent = {}
for r in tr:
  s = cent.setdefault(r['label'], [0.0] * (len(feats) + 1))
  for i, f in enumerate(feats):
    s[i] += float(r[f])
  s[-1] += 1
cent = {k: [v / s[-1] for v in s[:-1]] for k, s in cent.items()}
with open('labels.txt', 'w') as out:
  for r in csv.DictReader(open('test.csv')):
    x = [float(r[f]) for f in feats]
    out.write(min(cent, key=lambda k: sum((a - b) ** 2 for a, b in zip(x, cent[k]))) + '\\n')
PY"""


def classify(rng: random.Random, level: int) -> TaskSpec:
  n_cls, d, n, thr = (
    (3, 4, 6)[level],
    (2, 4, 8)[level],
    (90, 400, 1500)[level],
    (0.85, 0.9, 0.92)[level],
  )
  labels = [util.WORDS[i] for i in rng.sample(range(len(util.WORDS)), n_cls)]
  weights = [4 if i == 0 else 1 for i in range(n_cls)]  # an imbalanced majority class
  centers = {lab: [rng.uniform(-10, 10) for _ in range(d)] for lab in labels}
  for _ in range(100):  # keep centres well apart so nearest-centroid is clearly enough
    close = [
      (a, b) for a in labels for b in labels if a < b and math.dist(centers[a], centers[b]) < 8
    ]
    if not close:
      break
    centers[close[0][0]] = [rng.uniform(-12, 12) for _ in range(d)]

  def sample(m):
    out = []
    for _ in range(m):
      lab = rng.choices(labels, weights)[0]
      out.append([c + rng.gauss(0, 1.2) for c in centers[lab]] + [lab])
    return out

  train, test = sample(n), sample(n // 2)
  names = [f"f{i}" for i in range(d)]
  instruction = f"""/workspace/train.csv holds labelled points (features {", ".join(names)}, column
`label`); /workspace/test.csv holds unlabelled points. Write /workspace/labels.txt with one
predicted label per test row, in order. The hidden grader requires accuracy >= {thr}."""
  wrong = """python3 - <<'PY'
import csv, collections
c = collections.Counter(r['label'] for r in csv.DictReader(open('train.csv')))
n = sum(1 for _ in csv.DictReader(open('test.csv')))
open('labels.txt', 'w').write((c.most_common(1)[0][0] + '\\n') * n)
PY"""
  check = """
want = DATA["labels"]
got = lines("/workspace/labels.txt")
if len(got) != len(want):
  fail(f"labels.txt has {len(got)} lines, expected {len(want)}")
acc = sum(a == b for a, b in zip(got, want)) / len(want)
print("accuracy", acc)
if acc < DATA["thr"]:
  fail(f"accuracy {acc:.3f} < {DATA['thr']}")
"""
  return TaskSpec(
    instruction,
    check,
    CLASSIFY_SOLVE,
    wrong,
    files={
      "train.csv": _table(names + ["label"], train),
      "test.csv": _table(names, [r[:-1] for r in test]),
    },
    data={"labels": [r[-1] for r in test], "thr": thr},
    language="python",
    complexity=("moderate", "moderate", "complex")[level],
  )


def outliers(rng: random.Random, level: int) -> TaskSpec:
  n, thr = (200, 1000, 4000)[level], (0.85, 0.9, 0.95)[level]
  trend = (0.0, 0.02, 0.05)[level]
  vals, bad = [], set()
  for i in range(n):
    v = 100 + trend * i + 5 * math.sin(i / 15) + rng.gauss(0, 1)
    if rng.random() < 0.03 and (i - 1) not in bad and i > 5:
      v += rng.choice((-1, 1)) * rng.uniform(10, 16)
      bad.add(i)
    vals.append(round(v, 3))
  bad.add(n - 2)
  vals[n - 2] = round(vals[n - 2] - 15, 3)  # at least one low spike
  body = "t,value\n" + "".join(f"{i},{v}\n" for i, v in enumerate(vals))
  instruction = f"""/workspace/sensor.csv is a time series (t, value) of a slowly varying signal
with occasional isolated spikes (up or down, far outside the local noise). Write the t of every
spike, one per line, to /workspace/spikes.txt. The hidden grader requires F1 >= {thr} against the
true spike set."""
  solve = """python3 - <<'PY'
import csv, statistics
v = [float(r['value']) for r in csv.DictReader(open('sensor.csv'))]
res = [x - statistics.median(v[max(0, i - 5): i + 6]) for i, x in enumerate(v)]
mad = statistics.median(abs(r) for r in res) * 1.4826
open('spikes.txt', 'w').write(''.join(f'{i}\\n' for i, r in enumerate(res) if abs(r) > 5 * mad))
PY"""
  wrong = """python3 - <<'PY'
import csv, statistics
v = [float(r['value']) for r in csv.DictReader(open('sensor.csv'))]
m, s = statistics.mean(v), statistics.pstdev(v)
open('spikes.txt', 'w').write(''.join(f'{i}\\n' for i, x in enumerate(v) if x > m + 2 * s))
PY"""
  check = """
want = set(DATA["spikes"])
try:
  got = set(int(x) for x in lines("/workspace/spikes.txt"))
except ValueError as e:
  fail(f"bad line: {e}")
tp = len(got & want)
f1 = 2 * tp / (len(got) + len(want)) if got or want else 1.0
print("F1", f1)
if f1 < DATA["thr"]:
  fail(f"F1 {f1:.3f} < {DATA['thr']}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"sensor.csv": body},
    data={"spikes": sorted(bad), "thr": thr},
    language="python",
  )


def _rk4(p, T, dt):
  c, k, A, w, x, v = p

  def f(t, x, v):
    return (v, A * math.cos(w * t) - c * v - k * x)

  t = 0.0
  for _ in range(int(round(T / dt))):
    k1 = f(t, x, v)
    k2 = f(t + dt / 2, x + dt / 2 * k1[0], v + dt / 2 * k1[1])
    k3 = f(t + dt / 2, x + dt / 2 * k2[0], v + dt / 2 * k2[1])
    k4 = f(t + dt, x + dt * k3[0], v + dt * k3[1])
    x += dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
    v += dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    t += dt
  return x, v


def ode_oscillator(rng: random.Random, level: int) -> TaskSpec:
  tol = (1e-4, 1e-6, 1e-8)[level]
  p = (
    round(rng.uniform(0.1, 0.5), 3),
    round(rng.uniform(1, 4), 3),
    round(rng.uniform(0.5, 2), 3),
    round(rng.uniform(0.5, 2), 3),
    round(rng.uniform(-1, 1), 3),
    round(rng.uniform(-1, 1), 3),
  )
  T = float(rng.choice((5, 10, 20)))
  x, v = _rk4(p, T, 1e-3)
  c, k, A, w, x0, v0 = p
  instruction = f"""Integrate the driven damped oscillator
  x''(t) + {c} x'(t) + {k} x(t) = {A} cos({w} t),   x(0) = {x0}, x'(0) = {v0}
up to t = {T:g}. Write /workspace/result.txt with two numbers on one line: x({T:g}) and x'({T:g}).
Each must be within an absolute error of {tol:g} of the exact solution."""
  solve = f"""python3 - <<'PY'
import math
c, k, A, w, x, v = {p!r}
f = lambda t, x, v: (v, A * math.cos(w * t) - c * v - k * x)
dt, t = 1e-3, 0.0
for _ in range(int(round({T} / dt))):
  k1 = f(t, x, v); k2 = f(t + dt/2, x + dt/2*k1[0], v + dt/2*k1[1])
  k3 = f(t + dt/2, x + dt/2*k2[0], v + dt/2*k2[1]); k4 = f(t + dt, x + dt*k3[0], v + dt*k3[1])
  x += dt/6*(k1[0] + 2*k2[0] + 2*k3[0] + k4[0]); v += dt/6*(k1[1] + 2*k2[1] + 2*k3[1] + k4[1]); t += dt
open('result.txt', 'w').write(f'{{x:.12f}} {{v:.12f}}\\n')
PY"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = f"""python3 - <<'PY'
import math
c, k, A, w, x, v = {p!r}
dt, t = 1e-2, 0.0
for _ in range(int(round({T} / dt))):
  x, v, t = x + dt * v, v + dt * (A * math.cos(w * t) - c * v - k * x), t + dt
open('result.txt', 'w').write(f'{{x:.12f}} {{v:.12f}}\\n')
PY"""
  check = """
try:
  x, v = (float(s) for s in read("/workspace/result.txt").split())
except ValueError as e:
  fail(f"result.txt must hold two numbers: {e}")
print("err", abs(x - DATA["x"]), abs(v - DATA["v"]))
if abs(x - DATA["x"]) > DATA["tol"] or abs(v - DATA["v"]) > DATA["tol"]:
  fail(f"({x}, {v}) is not within {DATA['tol']} of the solution")
"""
  return TaskSpec(
    instruction, check, solve, wrong, data={"x": x, "v": v, "tol": tol}, language="python"
  )


def poly_roots(rng: random.Random, level: int) -> TaskSpec:
  gap = (0.02, 0.005, 0.001)[level]
  roots = sorted(
    rng.sample([i / 4 + 0.013 for i in range(-36, 36)], (3, 4, 5)[level])
  )  # pair never straddles a 0.1 grid line
  base = rng.choice(roots)
  roots.append(base + gap)
  roots = sorted(roots)
  coef = [1.0]  # highest degree first
  for r in roots:
    coef = [a - r * b for a, b in zip(coef + [0.0], [0.0] + coef, strict=True)]
  lo, hi = -10, 10
  instruction = f"""Find every real root in [{lo}, {hi}] of the polynomial with coefficients
(highest degree first) listed in /workspace/poly.txt. All roots are simple. Write them to
/workspace/roots.txt, one per line in increasing order, each within 1e-7 of the true root."""
  solve = f"""python3 - <<'PY'
c = [float(x) for x in open('poly.txt').read().split()]
p = lambda x: sum(a * x ** (len(c) - 1 - i) for i, a in enumerate(c))
n = 400000; lo, hi = {lo}, {hi}; xs = [lo + (hi - lo) * i / n for i in range(n + 1)]
out = []
for a, b in zip(xs, xs[1:]):
  fa, fb = p(a), p(b)
  if fa == 0: out.append(a)
  elif fa * fb < 0:
    for _ in range(80):
      m = (a + b) / 2
      if p(a) * p(m) <= 0: b = m
      else: a = m
    out.append((a + b) / 2)
open('roots.txt', 'w').write(''.join(f'{{r:.12f}}\\n' for r in out))
PY"""
  wrong = solve.replace("n = 400000", "n = 200")
  check = """
try:
  got = [float(x) for x in lines("/workspace/roots.txt")]
except ValueError as e:
  fail(f"bad number: {e}")
want = DATA["roots"]
if len(got) != len(want):
  fail(f"{len(got)} roots, expected {len(want)}")
for g, w in zip(got, want):
  if abs(g - w) > 1e-7:
    fail(f"root {g} vs {w}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"poly.txt": " ".join(repr(a) for a in coef) + "\n"},
    data={"roots": roots},
    language="python",
    complexity="moderate",
  )


FAMILIES = (
  Family(
    "stats_summary", "data_science", "metric_threshold", "text_only", stats_summary, ("statistics",)
  ),
  Family("linreg_fit", "data_science", "metric_threshold", "text_only", linreg, ("regression",)),
  Family(
    "centroid_classify",
    "data_science",
    "metric_threshold",
    "text_only",
    classify,
    ("classification",),
  ),
  Family(
    "spike_detection", "data_science", "metric_threshold", "text_only", outliers, ("anomaly",)
  ),
  Family(
    "ode_oscillator",
    "scientific_computing",
    "metric_threshold",
    "text_only",
    ode_oscillator,
    ("ode",),
  ),
  Family(
    "poly_roots", "scientific_computing", "metric_threshold", "text_only", poly_roots, ("numerics",)
  ),
)
