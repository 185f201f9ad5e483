"""Fixture families: images (OCR with tesseract), audio (DTMF, Morse) and stripped binaries.

Images are rendered here with Pillow (large clean text, OCR-safe words); audio is synthesised with
the standard library; binaries are compiled inside the sandbox at environment build time (gcc -s),
so no binary is stored in a task.
"""

from __future__ import annotations

import io
import math
import random
import struct
import wave

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.core import Family, TaskSpec


def render_png(lines: list[str], size: int) -> bytes:
  """Black text on white, one line per entry, Pillow's built-in scalable font."""
  from PIL import Image, ImageDraw, ImageFont  # noqa: PLC0415  (not in the Harbor venv)

  font = ImageFont.load_default(size=size)
  width = max(int(font.getlength(line)) for line in lines) + 2 * size
  img = Image.new("L", (width, (len(lines) + 1) * int(size * 1.6)), 255)
  draw = ImageDraw.Draw(img)
  for i, line in enumerate(lines):
    draw.text((size, size // 2 + i * int(size * 1.6)), line, font=font, fill=0)
  buf = io.BytesIO()
  img.save(buf, format="PNG", optimize=False)
  return buf.getvalue()


def ocr_invoice(rng: random.Random, level: int) -> TaskSpec:
  n = (3, 6, 10)[level]
  items, total = [], 0
  for name in rng.sample(util.PRODUCTS + util.WORDS[:10], n):
    q, cents = rng.randint(1, 9), rng.randint(100, 9999)
    items.append(f"{name}  qty {q}  price {cents // 100}.{cents % 100:02d}")
    total += q * cents
  lines = ["INVOICE"] + items
  instruction = """/workspace/invoice.png is a scanned invoice: one line per item with its quantity
(`qty`) and unit price. Write the invoice total (sum of qty x price) with exactly two decimals to
/workspace/answer.txt. (tesseract is installed.)"""
  solve = """tesseract invoice.png /tmp/inv >/dev/null 2>&1
python3 - <<'PY'
import re
t = open('/tmp/inv.txt').read()
cents = sum(int(q) * round(float(p) * 100) for q, p in re.findall(r'qty\\s*(\\d+)\\s*price\\s*(\\d+\\.\\d\\d)', t))
open('answer.txt', 'w').write(f'{cents // 100}.{cents % 100:02d}\\n')
PY"""  # noqa: E501 (embedded script, kept verbatim)
  wrong = solve.replace("int(q) * round", "round")
  check = """
if read("/workspace/answer.txt").strip() != DATA["total"]:
  fail(f"total {read('/workspace/answer.txt').strip()!r} != {DATA['total']}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"invoice.png": render_png(lines, (44, 40, 36)[level])},
    data={"total": f"{total // 100}.{total % 100:02d}"},
    complexity="moderate",
  )


def ocr_credentials(rng: random.Random, level: int) -> TaskSpec:
  n = (3, 5, 8)[level]
  users = rng.sample(util.FIRST, n)
  pw = {u: f"{util.word(rng)}-{rng.randint(1000, 9999)}-{util.word(rng)}" for u in users}
  target = users[rng.randint(1, n - 1)]
  lines = ["SHARED ACCOUNTS"] + [f"user {u}  pass {pw[u]}" for u in users]
  instruction = f"""Someone photographed a sticky note with shared credentials: /workspace/note.png.
As part of the incident review, recover the password of user `{target}` and write it (only the
password) to /workspace/answer.txt so it can be rotated."""
  solve = f"""tesseract note.png /tmp/note >/dev/null 2>&1
grep -E '^user {target} ' /tmp/note.txt | sed -E 's/.*pass //' | tr -d ' ' > answer.txt"""
  wrong = """tesseract note.png /tmp/note >/dev/null 2>&1
grep -m1 '^user ' /tmp/note.txt | sed -E 's/.*pass //' | tr -d ' ' > answer.txt"""
  check = """
if read("/workspace/answer.txt").strip() != DATA["pw"]:
  fail("wrong password")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"note.png": render_png(lines, (44, 40, 36)[level])},
    data={"pw": pw[target]},
  )


def _wav(samples: list[float], rate: int) -> bytes:
  buf = io.BytesIO()
  with wave.open(buf, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(rate)
    w.writeframes(
      b"".join(struct.pack("<h", max(-32767, min(32767, int(s * 12000)))) for s in samples)
    )
  return buf.getvalue()


DTMF = {
  "1": (697, 1209),
  "2": (697, 1336),
  "3": (697, 1477),
  "4": (770, 1209),
  "5": (770, 1336),
  "6": (770, 1477),
  "7": (852, 1209),
  "8": (852, 1336),
  "9": (852, 1477),
  "*": (941, 1209),
  "0": (941, 1336),
  "#": (941, 1477),
}

DTMF_SOLVE = """python3 - <<'PY'
import math, struct, wave
w = wave.open('call.wav'); rate = w.getframerate()
x = struct.unpack(f'<{w.getnframes()}h', w.readframes(w.getnframes()))
frame = rate // 100
energy = [sum(v * v for v in x[i:i + frame]) / frame for i in range(0, len(x) - frame + 1, frame)]
thr = max(energy) * 0.2
segs, cur = [], None
for i, e in enumerate(energy):
  if e > thr and cur is None: cur = i
  if e <= thr and cur is not None: segs.append((cur, i)); cur = None
if cur is not None: segs.append((cur, len(energy)))
def power(seg, f):
  k = 2 * math.cos(2 * math.pi * f / rate); s1 = s2 = 0.0
  for v in seg:
    s1, s2 = v + k * s1 - s2, s1
  return s1 * s1 + s2 * s2 - k * s1 * s2
LOW, HIGH = (697, 770, 852, 941), (1209, 1336, 1477)
KEYS = ['123', '456', '789', '*0#']
out = ''
for a, b in segs:
  seg = x[a * frame + frame: b * frame - frame] or x[a * frame: b * frame]
  lo = max(range(4), key=lambda i: power(seg, LOW[i])); hi = max(range(3), key=lambda i: power(seg, HIGH[i]))
  out += KEYS[lo][hi]
open('answer.txt', 'w').write(MERGE(out) + '\\n')
PY"""  # noqa: E501 (embedded script, kept verbatim)


def dtmf(rng: random.Random, level: int) -> TaskSpec:
  rate, n, noise = 8000, (4, 8, 14)[level], (0.0, 0.05, 0.1)[level]
  digits = [rng.choice("0123456789*#") for _ in range(n)]
  digits[rng.randrange(n - 1) + 1] = digits[0]
  k = rng.randrange(n - 1)
  digits[k + 1] = digits[k]  # a repeated key: only the silence separates the two presses
  code = "".join(digits)
  samples = [rng.gauss(0, noise) for _ in range(rate // 5)]
  for d in code:
    lo, hi = DTMF[d]
    dur = int(rate * rng.uniform(0.08, 0.15))
    samples += [
      0.5 * math.sin(2 * math.pi * lo * t / rate)
      + 0.5 * math.sin(2 * math.pi * hi * t / rate)
      + rng.gauss(0, noise)
      for t in range(dur)
    ]
    samples += [rng.gauss(0, noise) for _ in range(int(rate * rng.uniform(0.06, 0.1)))]
  instruction = """/workspace/call.wav is a recording of someone typing a code on a phone keypad
(DTMF tones, one tone per key press, silence between presses). Decode the keys pressed, in order,
and write them as one line (digits, `*` and `#`) to /workspace/answer.txt. (ffmpeg and python3 are
installed.)"""
  solve = DTMF_SOLVE.replace("MERGE(out)", "out")
  wrong = DTMF_SOLVE.replace(
    "MERGE(out)", "''.join(c for i, c in enumerate(out) if i == 0 or out[i - 1] != c)"
  )
  check = """
if read("/workspace/answer.txt").strip() != DATA["code"]:
  fail(f"decoded {read('/workspace/answer.txt').strip()!r}, expected {DATA['code']!r}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"call.wav": _wav(samples, rate)},
    data={"code": code},
    language="python",
    complexity="moderate",
  )


MORSE = {
  "a": ".-",
  "b": "-...",
  "c": "-.-.",
  "d": "-..",
  "e": ".",
  "f": "..-.",
  "g": "--.",
  "h": "....",
  "i": "..",
  "j": ".---",
  "k": "-.-",
  "l": ".-..",
  "m": "--",
  "n": "-.",
  "o": "---",
  "p": ".--.",
  "q": "--.-",
  "r": ".-.",
  "s": "...",
  "t": "-",
  "u": "..-",
  "v": "...-",
  "w": ".--",
  "x": "-..-",
  "y": "-.--",
  "z": "--..",
}

MORSE_SOLVE = """python3 - <<'PY'
import struct, wave
CODE = CODE_TABLE
w = wave.open('signal.wav'); rate = w.getframerate()
x = struct.unpack(f'<{w.getnframes()}h', w.readframes(w.getnframes()))
frame = rate // 200
on = [max(abs(v) for v in x[i:i + frame]) > 4000 for i in range(0, len(x) - frame + 1, frame)]
runs, cur, n = [], on[0], 0
for o in on:
  if o == cur: n += 1
  else: runs.append((cur, n)); cur, n = o, 1
runs.append((cur, n))
unit = min(n for o, n in runs if o)
rev = {v: k for k, v in CODE.items()}
text, sym = '', ''
for o, n in runs:
  if o: sym += '.' if n < 2 * unit else '-'
  elif n >= 2 * unit:
    text += rev.get(sym, '?') if sym else ''; sym = ''
    if WORD_GAP: text += ' '
text += rev.get(sym, '') if sym else ''
open('answer.txt', 'w').write(' '.join(text.split()) + '\\n')
PY"""


def morse(rng: random.Random, level: int) -> TaskSpec:
  rate, unit_s = 8000, rng.choice((0.05, 0.06, 0.08))
  words = [util.word(rng) for _ in range((2, 3, 5)[level])]
  text = " ".join(words)
  u = int(rate * unit_s)
  freq = rng.choice((550, 600, 700, 800))
  samples: list[float] = [0.0] * (3 * u)
  for wd in words:
    for ci, ch in enumerate(wd):
      for si, s in enumerate(MORSE[ch]):
        samples += [
          math.sin(2 * math.pi * freq * t / rate) for t in range(u * (1 if s == "." else 3))
        ]
        samples += [0.0] * (u if si < len(MORSE[ch]) - 1 else 0)
      samples += [0.0] * (3 * u if ci < len(wd) - 1 else 0)
    samples += [0.0] * (7 * u)
  instruction = """/workspace/signal.wav carries a message in International Morse code (a sine tone;
dot = 1 unit, dash = 3, gaps: 1 unit inside a letter, 3 between letters, 7 between words). Decode it
and write the message in lower case, words separated by single spaces, to /workspace/answer.txt."""
  table = repr(MORSE)
  solve = MORSE_SOLVE.replace("CODE_TABLE", table).replace(
    "if WORD_GAP: text += ' '", "if n >= 5 * unit: text += ' '"
  )
  wrong = MORSE_SOLVE.replace("CODE_TABLE", table).replace("    if WORD_GAP: text += ' '\n", "")
  check = """
if " ".join(read("/workspace/answer.txt").split()) != DATA["text"]:
  fail(f"decoded {read('/workspace/answer.txt').strip()!r}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    files={"signal.wav": _wav(samples, rate)},
    data={"text": text},
    language="python",
    complexity="moderate",
  )


VAULT_C = r"""#include <stdio.h>
#include <string.h>
static const char demo[] = "DEMO-%(demo)s";
static const unsigned char enc[] = {%(enc)s};
int main(int argc, char **argv) {
  volatile unsigned char k = %(k)d;
  char key[64];
  int n = (int)sizeof(enc);
  if (argc != 2) { puts("usage: vault KEY"); return 2; }
  if (strcmp(argv[1], demo) == 0) { puts("demo mode: read-only"); return 0; }
  for (int i = 0; i < n; i++) {
    int j = %(index)s;
    key[i] = (char)(enc[j] ^ (unsigned char)(k + %(roll)s));
  }
  key[n] = 0;
  if (strcmp(argv[1], key) == 0) { puts("ACCESS GRANTED"); return 0; }
  puts("ACCESS DENIED");
  return 1;
}
"""

VAULT_SOLVE = r"""objcopy -O binary --only-section=.rodata vault /tmp/rodata.bin
python3 - <<'PY'
import re, subprocess
b = open('/tmp/rodata.bin', 'rb').read()
pat = re.compile(rb'^[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}$')
def candidates():
  for off in range(len(b) - 13):
    chunk = b[off:off + 14]
    for k in range(256):
      for rolled in (False, True):
        dec = bytes(c ^ ((k + (i if rolled else 0)) & 255) for i, c in enumerate(chunk))
        for d in (dec, bytes(c ^ ((k + ((13 - i) if rolled else 0)) & 255) for i, c in enumerate(chunk))[::-1]):
          if pat.match(d):
            yield d.decode()
for cand in candidates():
  if b'ACCESS GRANTED' in subprocess.run(['./vault', cand], capture_output=True).stdout:
    open('answer.txt', 'w').write(cand + '\n')
    break
PY"""  # noqa: E501 (embedded script, kept verbatim)


def stripped_key(rng: random.Random, level: int) -> TaskSpec:
  alpha = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
  key = "-".join(util.token(rng, 4, alpha) for _ in range(3))
  k = rng.randint(1, 255)
  roll = level >= 1
  rev = level >= 2
  raw = [ord(c) ^ ((k + (i if roll else 0)) & 255) for i, c in enumerate(key)]
  enc = list(reversed(raw)) if rev else raw
  src = VAULT_C % {
    "demo": "-".join(util.token(rng, 4, alpha) for _ in range(2)),
    "k": k,
    "enc": ", ".join(str(x) for x in enc),
    "index": "n - 1 - i" if rev else "i",
    "roll": "i" if roll else "0",
  }
  setup = f"cat > /tmp/vault.c <<'C'\n{src}C\ngcc -O0 -s -o vault /tmp/vault.c\nrm -f /tmp/vault.c"
  instruction = """/workspace/vault is a stripped binary from a vendor who went out of business. It
takes a license key as its only argument and prints ACCESS GRANTED for the right one. Recover the
valid key (format XXXX-XXXX-XXXX) and write it to /workspace/answer.txt. binutils (objdump, strings,
objcopy) are installed."""
  wrong = (
    "strings -n 8 vault | grep -oE '[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}' | head -1 > answer.txt"
  )
  check = """
ans = read("/workspace/answer.txt").strip()
if ans != DATA["key"]:
  fail(f"{ans!r} is not the license key")
code, out = sh(f"/workspace/vault '{ans}'")
if "ACCESS GRANTED" not in out:
  fail("the binary does not accept the key")
"""
  return TaskSpec(
    instruction,
    check,
    VAULT_SOLVE,
    wrong,
    setup=setup,
    data={"key": key},
    language="c",
    complexity=("moderate", "complex", "complex")[level],
  )


MYSTERY_C = r"""#include <stdio.h>
#include <stdint.h>
int main(void) {
  unsigned long long v;
  while (scanf("%%llu", &v) == 1) {
    uint32_t x = (uint32_t)v;
    %(body)s
    printf("%%u\n", x);
  }
  return 0;
}
"""


def binary_clone(rng: random.Random, level: int) -> TaskSpec:
  a, b, s, t = (
    rng.randrange(3, 2**16, 2),
    rng.randint(1, 2**20),
    rng.randint(3, 13),
    rng.randint(2, 9),
  )
  steps = [
    f"x = x * {a}u;",
    f"x ^= x >> {s};",
    f"x += {b}u;",
    f"x = (x << {t}) | (x >> {32 - t});",
  ]
  steps = steps[: (2, 3, 4)[level]]
  py = {
    f"x = x * {a}u;": f"x = (x * {a}) & M",
    f"x ^= x >> {s};": f"x ^= x >> {s}",
    f"x += {b}u;": f"x = (x + {b}) & M",
    f"x = (x << {t}) | (x >> {32 - t});": f"x = ((x << {t}) | (x >> {32 - t})) & M",
  }
  src = MYSTERY_C % {"body": " ".join(steps)}
  setup = f"cat > /tmp/m.c <<'C'\n{src}C\ngcc -O2 -s -o mystery /tmp/m.c\nrm -f /tmp/m.c"
  body = "\n".join("    " + py[st] for st in steps)
  clone = (
    "import sys\nM = 0xFFFFFFFF\nfor line in sys.stdin:\n"
    "  if line.strip():\n    x = int(line) & M\n"
    f"{body}\n    print(x)\n"
  )
  instruction = """/workspace/mystery is a stripped binary that reads one unsigned integer per line
from stdin and prints one number per line. Its source is lost. Write /workspace/clone.py (python3,
same stdin/stdout behaviour) that produces exactly the same output for every input 0 <= x < 2^32.
Use objdump -d and experiments with the binary. It will be compared on many random inputs."""
  solve = f"cat > clone.py <<'PY'\n{clone}PY"
  wrong = solve.replace(" & M", "").replace("x = int(line) & M", "x = int(line)")
  check = """
import random
rng = random.Random(DATA["seed"])
xs = [rng.choice((rng.randint(0, 1000), rng.randint(0, 2**32 - 1))) for _ in range(DATA["n"])]
inp = "".join(f"{x}\\n" for x in xs)
_, want = sh("/workspace/mystery", input=inp)
code, got = sh("python3 /workspace/clone.py", input=inp)
if got.split() != want.split():
  bad = next((i for i, (g, w) in enumerate(zip(got.split(), want.split())) if g != w), None)
  fail(f"clone differs (exit {code}) at input {xs[bad] if bad is not None else '?'}")
"""
  return TaskSpec(
    instruction,
    check,
    solve,
    wrong,
    setup=setup,
    data={"seed": rng.randint(0, 2**31), "n": (100, 500, 2000)[level]},
    language="python",
    complexity=("moderate", "complex", "intricate")[level],
  )


FAMILIES = (
  Family("ocr_invoice_total", "data_processing", "exact_text", "image", ocr_invoice, ("ocr",)),
  Family(
    "ocr_credentials",
    "security",
    "exact_text",
    "image",
    ocr_credentials,
    ("ocr", "incident response"),
  ),
  Family("dtmf_decode", "data_processing", "exact_text", "audio", dtmf, ("signal processing",)),
  Family(
    "morse_decode", "scientific_computing", "exact_text", "audio", morse, ("signal processing",)
  ),
  Family(
    "stripped_license_key",
    "security",
    "exact_text",
    "stripped_binary",
    stripped_key,
    ("reverse engineering",),
  ),
  Family(
    "stripped_binary_clone",
    "debugging",
    "fuzz_equivalence",
    "stripped_binary",
    binary_clone,
    ("reverse engineering",),
  ),
)
