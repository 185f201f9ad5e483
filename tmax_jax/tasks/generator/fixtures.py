"""The recipe's fixture kinds: how a writer synthesises each at build time, and how a built
environment is checked for it.

Fixtures are made while the image builds (Dockerfile RUN steps on `FROM tmax-base:bookworm`, the
project base image, whose sandbox/packages.txt carries the tools: ffmpeg with libfreetype and the
DejaVu fonts, python3 with Pillow and NumPy, gcc/binutils, pip with setuptools), so a task ships
small scripts instead of binary blobs and the agent recovers the content with ordinary terminal
tools (tesseract, ffmpeg/ffprobe, objdump/strings). `RECIPES` is the writer prompt's hint per
kind; `probe_command` is the shell check the validate stage runs in the fresh sandbox; a compose
fixture is checked on the task files (`compose_services`).
"""

from __future__ import annotations

import shlex

from tmax_jax.tasks import vocabulary

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

RECIPES = {
  "text_only": "Seed plain text files only; no Dockerfile is needed.",
  "image": (
    "Render the image at build time: a build file (e.g. make_image.py) using Pillow "
    f"(ImageFont.truetype('{FONT}', 48), large dark text on a light background so tesseract "
    "can read it) or `ffmpeg -f lavfi -i color=white:s=900x300 -vf "
    f"drawtext=fontfile={FONT}:text=...:fontsize=60 -frames:v 1 OUT.png`; write it into "
    "$workdir and delete the script. The agent reads it with tesseract."
  ),
  "audio": (
    "Synthesise the audio at build time with python3 (wave + numpy) or `ffmpeg -f lavfi -i "
    "sine=...`: encode the information as tones, DTMF digits, Morse code or timing, never as "
    "speech (no speech recogniser is installed). Write a .wav/.flac/.mp3 into $workdir."
  ),
  "video": (
    "Encode the video at build time with ffmpeg from lavfi sources (color, testsrc2) with "
    f"drawtext (fontfile={FONT}) or colour changes carrying the information, e.g. "
    "`ffmpeg -f lavfi -i color=c=blue:s=320x240:d=2 ... OUT.mp4`; write it into $workdir. The "
    "agent inspects frames with ffmpeg/ffprobe (and tesseract)."
  ),
  "stripped_binary": (
    "Compile the program at build time (`gcc -O2 -s -o $workdir/NAME src.c`), then delete the "
    "source; the agent analyses it with objdump, strings and by running it."
  ),
  "vendored_package": (
    "Ship a source package under $workdir/vendor/NAME (Python with pyproject.toml or setup.py, "
    "or C with a Makefile); the task is about its code (a bug, a missing feature, a build "
    "problem). Install it at build time only when the task needs it installed "
    "(`pip install --no-index --no-build-isolation --break-system-packages ./vendor/NAME`)."
  ),
  "multi_service_compose": (
    "Put a docker-compose.yaml in the environment files: a `main` service built from the "
    "Dockerfile (where the agent works) plus one or more side services built from the same base "
    "that run offline programs (python3 -m http.server, a small python3 TCP server) with a "
    "`command`; all services share localhost, so give each its own port."
  ),
}
assert set(RECIPES) == set(vocabulary.FIXTURE_NAMES)

_MIME = {"image": "image/", "audio": "audio/", "video": "video/"}
_PACKAGE_FILES = (
  "pyproject.toml",
  "setup.py",
  "setup.cfg",
  "Makefile",
  "CMakeLists.txt",
  "configure",
  "Cargo.toml",
  "go.mod",
  "package.json",
)


def probe_command(fixture: str, workdir: str) -> str | None:
  """A shell command that exits 0 iff `workdir` holds the fixture (None: nothing to probe)."""
  w = shlex.quote(workdir)
  if fixture in _MIME:
    return (
      f"find {w} -type f -print0 | xargs -0 -r file --mime-type -- | "
      f"grep -qE ':[[:space:]]+{_MIME[fixture]}'"  # `file` pads the names into a column
    )
  if fixture == "stripped_binary":
    return f"find {w} -type f -print0 | xargs -0 -r file -- | grep -q 'ELF.*, stripped'"
  if fixture == "vendored_package":
    names = " -o ".join(f"-name {n}" for n in _PACKAGE_FILES)
    return f"find {w} -mindepth 2 -maxdepth 5 -type f \\( {names} \\) | grep -q ."
  return None


def probe_failure(fixture: str, workdir: str) -> str:
  """The rejection reason when probe_command fails."""
  wanted = {
    "image": "an image file (file --mime-type image/*)",
    "audio": "an audio file (file --mime-type audio/*)",
    "video": "a video file (file --mime-type video/*)",
    "stripped_binary": "a stripped ELF executable",
    "vendored_package": "a source package (pyproject.toml, setup.py, Makefile, ...) in a subdir",
  }[fixture]
  return f"fixture {fixture}: expected {wanted} under {workdir}; none found"
