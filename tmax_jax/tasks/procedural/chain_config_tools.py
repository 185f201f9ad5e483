"""The tools the config_fleet chain's oracles write (chain_config.py), as Python source text.

deploy/render.py grows by generation: RENDER_V1 (config_render), RENDER_V2 (host template
overrides, host_overrides) and RENDER_SECRETS (${secret:NAME}, file modes; secrets);
deploy/deploy.py is DEPLOY_V1 (host_overrides) and DEPLOY_V2 (--rollback; rollback). Later
versions are built from the earlier ones by anchored edits (`patched`), so a child's oracle
extends its parent's tool. VALIDATE is the validator the rollback generation ships.
"""

from __future__ import annotations

from tmax_jax.tasks.procedural.chains import patched

RENDER_HEAD = '''"""Renders the configuration templates of one host.

  python3 deploy/render.py [--config DIR] HOST OUTDIR

Variables: DIR/vars/common.env, then DIR/hosts/HOST.env (later wins); HOST is the host name.
Templates DIR/templates/*.tmpl -> OUTDIR/<name without .tmpl>. ${NAME}, ${NAME:-default} (unset
or empty -> default), $$ -> $; any other $ is literal. OUTDIR appears complete or not at all.
"""
import argparse
import os
import re
import sys
import tempfile

PLACEHOLDER = re.compile(
    r"\\$\\$|\\$\\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\\}")


class RenderError(Exception):
  pass


def load_env(path, env):
  with open(path) as f:
    for line in f:
      line = line.strip()
      if line and not line.startswith("#"):
        key, _, value = line.partition("=")
        env[key.strip()] = value.strip()


def host_vars(config, host):
  env = {}
  load_env(os.path.join(config, "vars", "common.env"), env)
  path = os.path.join(config, "hosts", host + ".env")
  if os.path.isfile(path):
    load_env(path, env)
  env["HOST"] = host
  return env


def templates(config, host):
  """Output name -> template path."""
  found = {}
  folder = os.path.join(config, "templates")
  for name in sorted(os.listdir(folder)):
    if name.endswith(".tmpl"):
      found[name[:-5]] = os.path.join(folder, name)
  return found


def render_text(text, env, where, used):
  def substitute(m):
    if m.group(0) == "$$":
      return "$"
    name, default = m.group("name"), m.group("default")
    used.add(name)
    if env.get(name):
      return env[name]
    if default is not None:
      return default
    if name in env:
      return ""
    raise RenderError(f"{where}: undefined variable {name}")
  return PLACEHOLDER.sub(substitute, text)


def render(config, host, out):
  env = host_vars(config, host)
  texts = {}
  for name, path in templates(config, host).items():
    with open(path) as f:
      texts[name] = render_text(f.read(), env, path, set())
  if os.path.lexists(out):
    raise RenderError(f"{out} already exists")
  parent = os.path.dirname(os.path.abspath(out))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=".render-", dir=parent)
  os.chmod(tmp, 0o755)
  for name, text in texts.items():
    with open(os.path.join(tmp, name), "w") as f:
      f.write(text)
  os.rename(tmp, out)
'''

RENDER_MAIN = """

def main(argv=None):
  ap = argparse.ArgumentParser(description="Renders the configuration templates of one host.")
  ap.add_argument("--config", default=os.path.dirname(os.path.abspath(__file__)))
  ap.add_argument("host")
  ap.add_argument("outdir")
  args = ap.parse_args(argv)
  try:
    render(args.config, args.host, args.outdir)
  except RenderError as e:
    print(f"render: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
"""

_OVERLAY = """  folder = os.path.join(config, "hosts", host)
  if os.path.isdir(folder):  # the host's own templates replace or add to the common ones
    for name in sorted(os.listdir(folder)):
      if name.endswith(".tmpl"):
        found[name[:-5]] = os.path.join(folder, name)
  return found
"""

# Secrets: ${secret:NAME} reads deploy/secrets/NAME; a file that uses one is written 0600.
_SECRET_PLACEHOLDER = (
  "(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
  "(?P<name>(?:secret:)?[A-Za-z_][A-Za-z0-9_]*)",
)
_SECRET_VARS = (
  """  env["HOST"] = host
""",
  """  env["HOST"] = host
  folder = os.path.join(config, "secrets")
  for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
    with open(os.path.join(folder, name)) as f:
      env["secret:" + name] = f.read().rstrip("\\n")
""",
)
_SECRET_WRITE = (
  """  texts = {}
  for name, path in templates(config, host).items():
    with open(path) as f:
      texts[name] = render_text(f.read(), env, path, set())
""",
  """  texts, secret = {}, set()
  for name, path in templates(config, host).items():
    used = set()
    with open(path) as f:
      texts[name] = render_text(f.read(), env, path, used)
    if any(u.startswith("secret:") for u in used):
      secret.add(name)
""",
)
_SECRET_MODE = (
  """      f.write(text)
  os.rename""",
  """      f.write(text)
    os.chmod(os.path.join(tmp, name), 0o600 if name in secret else 0o644)
  os.rename""",
)


RENDER_V1 = RENDER_HEAD + RENDER_MAIN
RENDER_V2 = patched(RENDER_V1, ("  return found\n", _OVERLAY))
RENDER_SECRETS = patched(RENDER_V1, _SECRET_PLACEHOLDER, _SECRET_VARS, _SECRET_WRITE, _SECRET_MODE)

DEPLOY_HEAD = '''"""Deploys one host's configuration as a release.

  python3 deploy/deploy.py [--config DIR] [--releases DIR] HOST

Renders HOST (render.py) as releases/HOST/r<N+1>; when that equals the current release nothing
changes, otherwise `current` (a relative symlink) is switched to it atomically.
"""
import argparse
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import render  # noqa: E402


class DeployError(Exception):
  pass


def numbers(root):
  if not os.path.isdir(root):
    return []
  return sorted(int(n[1:]) for n in os.listdir(root) if re.fullmatch(r"r\\d+", n))


def current(root):
  link = os.path.join(root, "current")
  return os.readlink(link) if os.path.islink(link) else None


def same(a, b):
  names = sorted(os.listdir(a))
  if names != sorted(os.listdir(b)):
    return False
  for n in names:
    with open(os.path.join(a, n), "rb") as fa, open(os.path.join(b, n), "rb") as fb:
      if fa.read() != fb.read():
        return False
  return True


def switch(root, name):
  tmp = os.path.join(root, ".current.tmp")
  if os.path.lexists(tmp):
    os.remove(tmp)
  os.symlink(name, tmp)
  os.replace(tmp, os.path.join(root, "current"))


def deploy(config, releases, host):
  root = os.path.join(releases, host)
  nums = numbers(root)
  name = "r%d" % ((nums[-1] if nums else 0) + 1)
  new = os.path.join(root, name)
  render.render(config, host, new)
  cur = current(root)
  if cur and same(os.path.join(root, cur), new):
    shutil.rmtree(new)
    print(f"{host}: unchanged ({cur})")
    return cur
  switch(root, name)
  print(f"{host}: {cur or '-'} -> {name}")
  return name
'''

DEPLOY_ROLLBACK = """

def rollback(releases, host):
  root = os.path.join(releases, host)
  cur = current(root)
  older = [n for n in numbers(root) if cur and n < int(cur[1:])]
  if not older:
    raise DeployError(f"{host}: no release before {cur or '(none)'} to roll back to")
  name = "r%d" % older[-1]
  switch(root, name)
  with open(os.path.join(root, "ROLLBACKS"), "a") as f:
    f.write(f"{cur} -> {name}\\n")
  print(f"{host}: rolled back {cur} -> {name}")
"""

DEPLOY_MAIN = """

def main(argv=None):
  ap = argparse.ArgumentParser(description="Deploys one host's configuration as a release.")
  ap.add_argument("--config", default=HERE)
  ap.add_argument("--releases", default=None, help="default: releases/ next to the config dir")
  ap.add_argument("host")
  args = ap.parse_args(argv)
  releases = args.releases or os.path.join(os.path.dirname(os.path.abspath(args.config)),
                                           "releases")
  try:
    deploy(args.config, releases, args.host)
  except render.RenderError as e:
    print(f"deploy: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
"""

DEPLOY_V1 = DEPLOY_HEAD + DEPLOY_MAIN
DEPLOY_V2 = patched(
  DEPLOY_HEAD + DEPLOY_ROLLBACK + DEPLOY_MAIN,
  (
    '  ap.add_argument("host")\n',
    '  ap.add_argument("--rollback", action="store_true", help="back to the previous release")\n'
    '  ap.add_argument("host")\n',
  ),
  (
    "  try:\n    deploy(",
    "  if args.rollback:\n    try:\n      rollback(releases, args.host)\n"
    '    except DeployError as e:\n      print(f"deploy: {e}", file=sys.stderr)\n'
    "      return 1\n    return 0\n  try:\n    deploy(",
  ),
)

VALIDATE = '''"""Checks a rendered release for port clashes (our stand-in for `nginx -t`).

  python3 deploy/validate.py RELEASE_DIR    exit 0 (ok) or 1 (prints every problem)
"""
import os
import re
import sys


def ports(folder):
  found = []
  for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name)) as f:
      for line in f:
        m = (re.match(r"\\s*(\\w*port)\\s*=\\s*(\\d+)\\s*$", line)
             or re.match(r"\\s*(listen)\\s+(\\d+)", line))
        if m:
          found.append((int(m.group(2)), f"{name} {m.group(1)}"))
  return found


def main(argv):
  if len(argv) != 2 or not os.path.isdir(argv[1]):
    print("usage: validate.py RELEASE_DIR", file=sys.stderr)
    return 2
  seen, problems = {}, []
  for port, where in ports(argv[1]):
    if port in seen:
      problems.append(f"port {port} is used twice: {seen[port]} and {where}")
    seen.setdefault(port, where)
  for p in problems:
    print("validate:", p)
  if not problems:
    print("validate: ok")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
'''
