"""The video fixture family: read a colour timeline out of a clip with ffmpeg.

The clip is encoded inside the sandbox at environment build time (ffmpeg's lavfi colour sources,
concatenated, MPEG-4 in .mp4), so no video is stored in a task; the hidden checker knows the
timeline from the generator.
"""

from __future__ import annotations

import random

from tmax_jax.tasks.procedural.core import Family, TaskSpec

PALETTE = {
  "red": "ff0000",
  "green": "00ff00",
  "blue": "0000ff",
  "yellow": "ffff00",
  "magenta": "ff00ff",
  "cyan": "00ffff",
  "white": "ffffff",
  "black": "000000",
}
FPS = 10

TIMELINE_SOLVE = """python3 - <<'PY'
import subprocess
PALETTE = PALETTE_RGB
raw = subprocess.run(['ffmpeg', '-loglevel', 'error', '-i', 'clip.mp4', '-vf',
                      'scale=1:1:flags=area', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-'],
                     capture_output=True, check=True).stdout
def near(p):
  return min(PALETTE, key=lambda n: sum((a - b) ** 2 for a, b in zip(PALETTE[n], p)))
runs = []
for i in range(0, len(raw) - 2, 3):
  name = near(raw[i:i + 3])
  if runs and runs[-1][0] == name:
    runs[-1][1] += 1
  else:
    runs.append([name, 1])
names = [n for n, k in runs if k >= 2]  # a one-frame run is an encoder transition
out = COLLAPSE(names)
open('colors.txt', 'w').write('\\n'.join(out) + '\\n')
PY"""
# consecutive repeats collapse; the wrong solution drops every repeat (first appearance order)
COLLAPSE = "[n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]"
WRONG_COLLAPSE = "list(dict.fromkeys(names))"


def _timeline(rng: random.Random, palette: list[str], n: int) -> list[str]:
  """n colours, neighbours different, one colour shown again later (not adjacent)."""
  seq = [rng.choice(palette)]
  while len(seq) < n:
    seq.append(rng.choice([c for c in palette if c != seq[-1]]))
  j = rng.randrange(2, n)
  seq[j] = seq[j - 2]
  if j + 1 < n and seq[j + 1] == seq[j]:
    avoid = {seq[j]} | ({seq[j + 2]} if j + 2 < n else set())
    seq[j + 1] = rng.choice([c for c in palette if c not in avoid])
  return seq


def color_timeline(rng: random.Random, level: int) -> TaskSpec:
  n, lo, hi = ((4, 10, 20), (6, 6, 15), (9, 4, 10))[level]  # segments, min/max frames
  palette = sorted(rng.sample(sorted(PALETTE), (4, 6, 8)[level]))
  seq = _timeline(rng, palette, n)
  inputs = " ".join(
    f"-f lavfi -i color=c=0x{PALETTE[c]}:s=64x48:r={FPS}:d={rng.randint(lo, hi) / FPS:.1f}"
    for c in seq
  )
  labels = "".join(f"[{i}:v]" for i in range(n))
  setup = (
    f"ffmpeg -loglevel error -y {inputs} -filter_complex "
    f"'{labels}concat=n={n}:v=1:a=0[v]' -map '[v]' -c:v mpeg4 -q:v 2 -pix_fmt yuv420p "
    "clip.mp4"
  )
  names = ", ".join(f"{c} (#{PALETTE[c]})" for c in palette)
  instruction = f"""/workspace/clip.mp4 is a recording of a status light that shows one solid
colour at a time. Write the colours it shows, in the order they appear, one name per line, to
/workspace/colors.txt. A colour that stays on counts once; a colour that comes back later is
listed again. The light only uses these colours: {names}. (ffmpeg and python3 are installed.)"""
  rgb = {c: tuple(bytes.fromhex(PALETTE[c])) for c in palette}
  solve = TIMELINE_SOLVE.replace("PALETTE_RGB", repr(rgb))
  check = """
got = [l.lower() for l in lines("/workspace/colors.txt")]
if got != DATA["colors"]:
  fail(f"colours {got}, expected {len(DATA['colors'])} colours in the clip's order")
"""
  return TaskSpec(
    instruction,
    check,
    solve.replace("COLLAPSE(names)", COLLAPSE),
    solve.replace("COLLAPSE(names)", WRONG_COLLAPSE),
    setup=setup,
    data={"colors": seq},
    language="python",
    complexity=("short", "moderate", "moderate")[level],
  )


FAMILIES = (
  Family(
    "video_color_timeline",
    "data_processing",
    "exact_text",
    "video",
    color_timeline,
    ("video processing",),
  ),
)
