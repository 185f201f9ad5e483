"""config_fleet chain (system_administration): config templating -> second host -> rollback.

  config_render   write deploy/render.py (${VAR}, ${VAR:-default}, $$; common.env then the
                  host's .env; undefined -> exit 2, nothing written) and deploy web1 as the
                  release releases/web1/r1 with a `current` symlink
  host_overrides  a second host web2 with its own template overrides and templates only it has;
                  a deploy tool deploy/deploy.py (a new release only when the output changed,
                  atomic switch of `current`), used for both hosts
  rollback        (after host_overrides) a common.env change rolled out to every host with a
                  shipped validator: the host whose new release fails it is rolled back
                  (deploy.py --rollback, ROLLBACKS log); the failed release is kept
  secrets         (branch after config_render) ${secret:NAME} from deploy/secrets/, rendered
                  files holding a secret are 0600, web1 redeployed as r2

Release directories never change once written (every check reads the releases it expects and
requires `current` to be a relative link to an existing release), and the tools only gain
options, so the earlier generations' checks of the tools (run on fresh config trees in a temp
dir) keep holding as they grow.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from tmax_jax.tasks.procedural import util
from tmax_jax.tasks.procedural.chain_config_tools import (
  DEPLOY_V1,
  DEPLOY_V2,
  RENDER_SECRETS,
  RENDER_V1,
  RENDER_V2,
  VALIDATE,
)
from tmax_jax.tasks.procedural.chains import STEP_MARK, ChainFamily, Extension, patched
from tmax_jax.tasks.procedural.core import Family, TaskSpec

# ------------------------------------------------------------------------ the fleet's templates
APP_INI = """# ${HOST}: application settings (rendered by deploy/render.py; do not edit)
[server]
bind = ${BIND:-0.0.0.0}
port = ${APP_PORT}
workers = ${WORKERS:-2}

[database]
url = postgres://${DB_USER}@${DB_HOST}:${DB_PORT:-5432}/${DB_NAME}?${DB_OPTS}
pool = ${DB_POOL:-5}

[admin]
admin_port = ${ADMIN_PORT:-9000}
"""
NGINX = """server {
  listen ${LISTEN_PORT:-80};
  server_name ${HOST}.${DOMAIN};
  access_log /var/log/nginx/${SERVICE}.log;
  location / {
    proxy_pass http://127.0.0.1:${APP_PORT};
    proxy_set_header Host $host;
    proxy_set_header X-Real-IP $remote_addr;
  }
}
"""
LOGROTATE = """/var/log/${SERVICE}/*.log {
  ${ROTATE_FREQ:-daily}
  rotate ${ROTATE_KEEP}
  compress
  postrotate
    kill -HUP $(cat /run/${SERVICE}.pid) 2>/dev/null || true
  endscript
}
"""
MOTD = """${GREETING:-Welcome} to ${HOST}.${DOMAIN}
Service ${SERVICE} (${WORKERS} workers); monthly budget $$${BUDGET}, literally $${HOST}.
"""
NGINX_TLS = """server {
  listen ${LISTEN_PORT} ssl;
  server_name ${HOST}.${DOMAIN};
  include /etc/nginx/${SERVICE}/tls.conf;
  location / {
    proxy_pass http://127.0.0.1:${APP_PORT};
    proxy_set_header Host $host;
  }
  location /admin/ {
    allow ${ADMIN_NET:-10.0.0.0/8};
    deny all;
    proxy_pass http://127.0.0.1:${ADMIN_PORT};
  }
}
"""
TLS = """ssl_certificate /etc/ssl/${HOST}.${DOMAIN}.pem;
ssl_certificate_key /etc/ssl/private/${HOST}.${DOMAIN}.key;
ssl_protocols ${TLS_PROTOCOLS:-TLSv1.2 TLSv1.3};
"""
SECRET_LINE = "password = ${secret:db_password}\n"
TEMPLATES = {
  "app.ini.tmpl": APP_INI,
  "nginx.conf.tmpl": NGINX,
  "logrotate.conf.tmpl": LOGROTATE,
  "motd.tmpl": MOTD,
}

_REF = re.compile(r"\$\$|\$\{((?:secret:)?[A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(text: str, env: dict) -> str:
  """The reference renderer of the hidden checks (KeyError on an undefined variable)."""

  def sub(m):
    if m.group(0) == "$$":
      return "$"
    name, default = m.group(1), m.group(2)
    if env.get(name):
      return env[name]
    if default is not None:
      return default
    if name in env:
      return ""
    raise KeyError(name)

  return _REF.sub(sub, text)


def _render(cfg: dict, host: str) -> dict[str, str]:
  """Output name -> text of `host` for a config state (see `_config`)."""
  env = {**cfg["common"], **cfg["hosts"].get(host, {}), "HOST": host}
  env.update({"secret:" + k: v for k, v in cfg.get("secrets", {}).items()})
  tmpl = {**cfg["templates"], **cfg.get("host_templates", {}).get(host, {})}
  return {name[:-5]: _expand(text, env) for name, text in sorted(tmpl.items())}


def _env_text(rng: random.Random, env: dict, title: str) -> str:
  lines = [f"# {title}", ""]
  spaced = rng.choice(sorted(env)) if env else None
  for key, value in env.items():  # whitespace around key and value is not part of them
    lines.append(f"{key} = {value}" if key == spaced else f"{key}={value}")
    if rng.random() < 0.2:
      lines.append("")
  return "\n".join(lines) + "\n"


def _files(rng: random.Random, cfg: dict, prefix: str = "deploy/") -> dict[str, str]:
  files = {f"{prefix}vars/common.env": _env_text(rng, cfg["common"], "shared by every host")}
  for host, env in cfg["hosts"].items():
    files[f"{prefix}hosts/{host}.env"] = _env_text(rng, env, f"{host} overrides")
  for name, text in cfg["templates"].items():
    files[f"{prefix}templates/{name}"] = text
  for host, tmpl in cfg.get("host_templates", {}).items():
    files.update({f"{prefix}hosts/{host}/{name}": text for name, text in tmpl.items()})
  for name, value in cfg.get("secrets", {}).items():
    files[f"{prefix}secrets/{name}"] = value + "\n"
  return files


def _config(rng: random.Random, level: int) -> dict:
  svc = util.word(rng)
  common = {
    "DOMAIN": f"{util.word(rng)}.internal",
    "APP_PORT": str(rng.randint(8000, 8099)),
    "DB_HOST": f"db1.{svc}.internal",
    "DB_USER": svc,
    "DB_NAME": f"{svc}_prod",
    "DB_OPTS": f"sslmode=require&connect_timeout={rng.randint(3, 9)}",
    "WORKERS": str(rng.choice((2, 4))),
    "SERVICE": svc,
    "GREETING": "",
    "ROTATE_KEEP": str(rng.choice((7, 14, 30))),
    "BUDGET": str(rng.randint(100, 999)),
  }
  web1 = {"WORKERS": str(rng.choice((8, 16))), "DB_POOL": str(rng.choice((10, 20, 40)))}
  names = list(TEMPLATES)[: level + 2]  # the knob: how many templates the fleet has
  return {"common": common, "hosts": {"web1": web1}, "templates": {n: TEMPLATES[n] for n in names}}


def _fixture(rng: random.Random, host_templates: bool = False, secrets: bool = False) -> dict:
  """A small random config tree for a hidden test -> {files, host, want, missing, config}."""
  k = [f"{util.word(rng).upper()}_{i}" for i in range(6)]

  def v(name, default=None):
    return "${" + name + ("" if default is None else ":-" + default) + "}"

  host = f"{util.word(rng)}{rng.randint(1, 9)}"
  common = {
    k[0]: util.word(rng),
    k[1]: f"a={rng.randint(1, 9)}&b=c",
    k[2]: "",
    k[5]: util.word(rng),
  }
  host_env = {k[4]: str(rng.randint(1, 999)), k[5]: util.word(rng) + "_host"}
  main = (
    "\n".join(
      (
        f"# generated for {v('HOST')}",
        f"a = {v(k[0])}",
        f"b = {v(k[1])}",
        f"c = [{v(k[2])}] [{v(k[2], 'empty')}]",
        f"d = {v(k[3], util.word(rng))}",
        f"e = {v(k[4])}",
        f"f = {v(k[5], 'never')}",
        f"cost = $${rng.randint(1, 99)}, $${v(k[0])} and $$$${v(k[0])}",
        "literal = $$" + "{" + k[0] + "}",
        f"keep = $remote_addr $(hostname) {v(k[0], 'x')}",
      )
    )
    + "\n"
  )
  cfg = {
    "common": common,
    "hosts": {host: host_env},
    "templates": {"main.conf.tmpl": main, "plain.txt.tmpl": "no placeholders: $5, ${}\n"},
  }
  if host_templates:
    cfg["host_templates"] = {
      host: {
        "plain.txt.tmpl": f"{host} only: {v(k[4])}\n",
        "extra.conf.tmpl": f"extra = {v(k[5])}\n",
      },
      "other9": {"main.conf.tmpl": "not for this host\n"},
    }
  if secrets:
    cfg["secrets"] = {"token": util.token(rng, 24)}
    cfg["templates"]["secret.conf.tmpl"] = f"user = {v(k[0])}\ntoken = {v('secret:token')}\n"
  return {
    "files": _files(rng, cfg),
    "host": host,
    "want": _render(cfg, host),
    "missing": f"NOPE_{util.word(rng).upper()}",
    "config": cfg,
  }


# ------------------------------------------------------------------------------ hidden checks
CHECK_COMMON = """
import re, stat, tempfile


def run(*args):
  try:
    return subprocess.run(["python3", *args], capture_output=True, text=True, timeout=60)
  except subprocess.TimeoutExpired:
    fail(f"python3 {' '.join(args)} did not finish in 60 s")


def put(root, files):
  for rel, text in files.items():
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write(text)


def tree(root):
  out = {}
  for d, _, names in os.walk(root):
    for n in names:
      with open(os.path.join(d, n), encoding="utf-8", errors="replace") as f:
        out[os.path.relpath(os.path.join(d, n), root)] = f.read()
  return out


def same_files(what, got, want):
  bad = sorted(set(got) ^ set(want)) or [n for n in sorted(want) if got[n] != want[n]]
  if bad:
    n = bad[0]
    if n not in got or n not in want:
      fail(f"{what}: holds {sorted(got)}, expected {sorted(want)}")
    fail(f"{what}/{n} is {got[n][:400]!r}, expected {want[n][:400]!r}")


def modes(what, root, want):
  for name, mode in want.items():
    got = stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
    if got != mode:
      fail(f"{what}/{name} has mode {got:o}, expected {mode:o}")


def release(host, name, want):
  root = f"releases/{host}/{name}"
  if not os.path.isdir(root) or os.path.islink(root):
    fail(f"{root} is not a release directory")
  same_files(root, tree(root), want)


def current(host):
  link = f"releases/{host}/current"
  if not os.path.islink(link):
    fail(f"{link} is not a symlink")
  target = os.readlink(link)
  if not re.fullmatch(r"r[0-9]+", target) or not os.path.isdir(f"releases/{host}/{target}"):
    fail(f"{link} -> {target!r}: expected a relative link to an existing release r<N>")
  return target


def fixture(fx):
  tmp = tempfile.mkdtemp()
  put(tmp, fx["files"])
  return tmp


def render_fixture(fx):
  tmp = fixture(fx)
  p = run("/workspace/deploy/render.py", "--config", tmp + "/deploy", fx["host"], tmp + "/out")
  if p.returncode != 0:
    fail(f"render.py --config <a new tree> {fx['host']} <out> exited {p.returncode}: "
         f"{p.stderr[-400:]}")
  same_files("render.py output", tree(tmp + "/out"), fx["want"])
  return tmp, p


def render_fails(fx, files, name, drop=()):
  tmp = fixture(fx)
  put(tmp, files)
  for rel in drop:
    os.remove(os.path.join(tmp, rel))
  p = run("/workspace/deploy/render.py", "--config", tmp + "/deploy", fx["host"], tmp + "/out")
  if p.returncode != 2 or name not in p.stderr:
    fail(f"render.py with an undefined {name} should exit 2 naming it on stderr; exit "
         f"{p.returncode}, stderr {p.stderr[-300:]!r}")
  if os.path.exists(tmp + "/out"):
    fail("render.py left a partial output directory after an error")
  return p


def deploy(tmp, host, *extra):
  return run("/workspace/deploy/deploy.py", "--config", tmp + "/deploy", "--releases",
             tmp + "/rel", *extra, host)


def releases(tmp, host):
  root = f"{tmp}/rel/{host}"
  if not os.path.isdir(root):
    return [], None
  names = sorted(n for n in os.listdir(root) if re.fullmatch(r"r[0-9]+", n))
  link = os.readlink(root + "/current") if os.path.islink(root + "/current") else None
  return names, link
"""

RENDER_CHECK = (
  CHECK_COMMON
  + """
fx = DATA["fixture"]
render_fixture(fx)
p = render_fails(fx, {"deploy/templates/broken.conf.tmpl": "x = ${" + fx["missing"] + "}\\n"},
                 fx["missing"])
if "broken.conf" not in p.stderr:
  fail(f"render.py's error should name the template (broken.conf.tmpl): {p.stderr[-300:]!r}")
release("web1", "r1", DATA["r1"])
current("web1")
"""
)


def _tool(path: str, source: str) -> str:
  return f"cat > {path} <<'PYEOF'\n{source}PYEOF"


def _steps(*parts: str) -> str:
  """An oracle in tool calls for scripted teachers (chains.STEP_MARK between them)."""
  return f"\n{STEP_MARK}\n".join(parts)


def config_render(rng: random.Random, level: int) -> TaskSpec:
  cfg = _config(rng, level)
  instruction = """Our service configuration lives in /workspace/deploy: templates/*.tmpl,
vars/common.env (shared) and hosts/<host>.env (per-host overrides). Write the renderer
deploy/render.py, used as `python3 deploy/render.py [--config DIR] HOST OUTDIR` (DIR defaults to
the directory render.py is in):
- variables: DIR/vars/common.env, then DIR/hosts/HOST.env if it exists (a later file wins);
  lines `KEY=VALUE`, whitespace around key and value ignored, blank lines and # comments skipped;
  HOST is always the host name;
- every DIR/templates/<name>.tmpl is rendered to OUTDIR/<name>: `${NAME}` is the value (empty if
  set to nothing), `${NAME:-text}` is text when NAME is unset or empty, `$$` is a literal `$`; any
  other `$` (nginx's $host, shell's $(...)) stays as it is;
- an undefined variable without a default is an error: exit status 2 with a message on stderr
  naming the variable and the template, and OUTDIR is not created (it appears complete or not at
  all; it must not exist beforehand).
Then deploy host web1: render it into releases/web1/r1 and make releases/web1/current a relative
symlink to r1. A release directory is never changed once written."""
  solve = _steps(
    "ls -R deploy; cat deploy/vars/common.env deploy/hosts/web1.env",
    _tool("deploy/render.py", RENDER_V1),
    "python3 deploy/render.py web1 releases/web1/r1 && ln -sfn r1 "
    "releases/web1/current && ls -l releases/web1",
    "t=$(mktemp -d) && python3 deploy/render.py web1 $t/again && diff -r $t/again "
    "releases/web1/current && rm -rf $t && cat releases/web1/r1/app.ini",
  )
  # Plausible wrong: the host file is read first, so common.env overrides the host's values.
  wrong = patched(
    solve,
    (
      """  load_env(os.path.join(config, "vars", "common.env"), env)
  path = os.path.join(config, "hosts", host + ".env")
  if os.path.isfile(path):
    load_env(path, env)""",
      """  path = os.path.join(config, "hosts", host + ".env")
  if os.path.isfile(path):
    load_env(path, env)
  load_env(os.path.join(config, "vars", "common.env"), env)""",
    ),
  )
  return TaskSpec(
    instruction,
    RENDER_CHECK,
    solve,
    wrong,
    files=_files(rng, cfg),
    data={"fixture": _fixture(rng), "r1": _render(cfg, "web1"), "config": cfg},
    complexity=("moderate", "complex", "complex")[level],
    language="python",
  )


OVERRIDES_CHECK = (
  CHECK_COMMON
  + """
fx = DATA["fixture"]
tmp, _ = render_fixture(fx)
host = fx["host"]
for attempt in (1, 2):  # the second deploy of the same output changes nothing
  p = deploy(tmp, host)
  if p.returncode != 0:
    fail(f"deploy.py --config <tree> --releases <dir> {host} exited {p.returncode}: "
         f"{p.stderr[-300:]}")
  if releases(tmp, host) != (["r1"], "r1"):
    fail(f"after deploy #{attempt} of an unchanged config: releases {releases(tmp, host)}, "
         "expected only r1 with current -> r1")
same_files("the deployed release", tree(f"{tmp}/rel/{host}/r1"), fx["want"])
put(tmp, DATA["change"])
p = deploy(tmp, host)
if p.returncode != 0 or releases(tmp, host) != (["r1", "r2"], "r2"):
  fail(f"a changed config should become r2 with current -> r2: exit {p.returncode}, "
       f"releases {releases(tmp, host)}")
same_files("the new release", tree(f"{tmp}/rel/{host}/r2"), DATA["want_changed"])
same_files("the old release", tree(f"{tmp}/rel/{host}/r1"), fx["want"])
put(tmp, {"deploy/templates/broken.conf.tmpl": "x = ${" + fx["missing"] + "}\\n"})
p = deploy(tmp, host)
if p.returncode != 2 or releases(tmp, host) != (["r1", "r2"], "r2"):
  fail(f"deploying a config with an undefined variable should exit 2 and change nothing: exit "
       f"{p.returncode}, releases {releases(tmp, host)}")
release("web2", "r1", DATA["web2"])
current("web2")
"""
)


def host_overrides(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  cfg = dict(specs[-1].data["config"])
  web2 = {"LISTEN_PORT": "443", "ADMIN_PORT": str(rng.randint(9100, 9199)), "WORKERS": "2"}
  if level >= 1:
    web2["TLS_PROTOCOLS"] = "TLSv1.3"
  cfg["hosts"] = {**cfg["hosts"], "web2": web2}
  cfg["host_templates"] = {"web2": {"nginx.conf.tmpl": NGINX_TLS, "tls.conf.tmpl": TLS}}
  files = {k: v for k, v in _files(rng, cfg).items() if "/web2" in k}
  fx = _fixture(rng, host_templates=True)
  changed = dict(fx["config"], common={**fx["config"]["common"], "NEW_VAR": "1"})
  key = next(iter(changed["common"]))
  changed["common"][key] += "_v2"
  change = {"deploy/vars/common.env": _env_text(rng, changed["common"], "changed")}
  instruction = """Our configuration (deploy/templates/*.tmpl, deploy/vars/common.env,
deploy/hosts/<host>.env) is rendered by deploy/render.py (`render.py [--config DIR] HOST OUTDIR`;
${NAME}, ${NAME:-default}, $$) and web1 runs the release releases/web1/r1 (releases/web1/current
is a relative symlink to it). A second host, web2, joins: deploy/hosts/web2.env and
deploy/hosts/web2/ with templates of its own.
1. Extend render.py: a template deploy/hosts/HOST/<name>.tmpl replaces the common template of the
   same name for that host, or adds a template only that host has. Everything else stays as it is.
2. Write deploy/deploy.py, `python3 deploy/deploy.py [--config DIR] [--releases DIR] HOST` (DIR
   defaults: the directory deploy.py is in; releases/ next to that directory). It renders HOST as
   the next release releases/HOST/r<N+1> (N = the highest existing release number, 0 if none).
   When that release is identical to the current one (same file names and contents) it is
   discarded and nothing changes; otherwise `current` is switched to it atomically (a new
   relative symlink renamed over the old one). A render error exits 2 and changes nothing.
3. Deploy web1 and web2 with it."""
  solve = _steps(
    "ls -R deploy/hosts; cat deploy/hosts/web2.env; ls -l releases/*",
    _tool("deploy/render.py", RENDER_V2),
    _tool("deploy/deploy.py", DEPLOY_V1),
    "python3 deploy/deploy.py web1 && python3 deploy/deploy.py web2",
    "test -h releases/web2/current && python3 deploy/deploy.py web2 | grep unchanged "
    "&& ls -l releases/*/ && cat releases/web2/current/nginx.conf",
  )
  # Plausible wrong: every deploy cuts a new release, even when nothing changed.
  wrong = patched(solve, ("  if cur and same(os.path.join(root, cur), new):", "  if False:"))
  return TaskSpec(
    instruction,
    OVERRIDES_CHECK,
    solve,
    wrong,
    files=files,
    data={
      "fixture": fx,
      "change": change,
      "web2": _render(cfg, "web2"),
      "want_changed": _render(changed, fx["host"]),
      "config": cfg,
    },
    complexity="complex",
    language="python",
  )


ROLLBACK_CHECK = (
  CHECK_COMMON
  + """
fx = DATA["fixture"]
tmp = fixture(fx)
host = fx["host"]
deploy(tmp, host)
put(tmp, DATA["change"])
deploy(tmp, host)
if releases(tmp, host) != (["r1", "r2"], "r2"):
  fail(f"two deploys of different configs should give r1, r2 with current -> r2: "
       f"{releases(tmp, host)}")
p = deploy(tmp, host, "--rollback")
log = f"{tmp}/rel/{host}/ROLLBACKS"
if p.returncode != 0 or releases(tmp, host) != (["r1", "r2"], "r1"):
  fail(f"deploy.py --rollback should switch current back to r1 and keep r2: exit "
       f"{p.returncode}, releases {releases(tmp, host)}, stderr {p.stderr[-200:]!r}")
if lines(log) != ["r2 -> r1"]:
  fail(f"releases/<host>/ROLLBACKS should read 'r2 -> r1', got {lines(log)}")
p = deploy(tmp, host, "--rollback")
if p.returncode != 1 or releases(tmp, host) != (["r1", "r2"], "r1") or lines(log) != ["r2 -> r1"]:
  fail(f"--rollback with no earlier release should exit 1 and change nothing: exit "
       f"{p.returncode}, releases {releases(tmp, host)}")
release("web1", "r2", DATA["web1"])
if current("web1") != "r2":
  fail("web1's new release passes validation: releases/web1/current should be r2")
release("web2", "r2", DATA["web2"])
if current("web2") != "r1":
  fail("web2's new release fails deploy/validate.py: it should be rolled back to r1 (and kept)")
if lines("releases/web2/ROLLBACKS") != ["r2 -> r1"]:
  fail(f"releases/web2/ROLLBACKS should read 'r2 -> r1', got {lines('releases/web2/ROLLBACKS')}")
if os.path.exists("releases/web1/ROLLBACKS"):
  fail("web1 was never rolled back, yet releases/web1/ROLLBACKS exists")
"""
)

ROLLOUT = "for h in web1 web2; do python3 deploy/deploy.py $h; done"
ROLLOUT_VALIDATED = """for h in web1 web2; do
  python3 deploy/deploy.py $h
  if ! python3 deploy/validate.py releases/$h/current; then
    python3 deploy/deploy.py --rollback $h
  fi
done"""


def rollback(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  cfg = dict(specs[-1].data["config"])
  # The new application port is web2's admin port: only web2's release clashes.
  common = {
    **cfg["common"],
    "APP_PORT": cfg["hosts"]["web2"]["ADMIN_PORT"],
    "DB_POOL": str(rng.choice((25, 50))),
  }
  if level >= 1:
    common["ROTATE_FREQ"] = "weekly"
  cfg["common"] = common
  fx = specs[-1].data["fixture"]
  instruction = """Our configuration is deployed with deploy/deploy.py (`deploy.py [--config DIR]
[--releases DIR] HOST`: renders HOST as the next release releases/HOST/r<N+1> unless it equals the
current one, then switches releases/HOST/current, a relative symlink, atomically). web1 and web2
run r1. deploy/vars/common.env has just been changed (a new application port, pool size, ...),
and deploy/validate.py RELEASE_DIR (exit 0 = ok) now checks a rendered release.
1. Add `--rollback` to deploy.py: `deploy.py [--config DIR] [--releases DIR] --rollback HOST`
   switches current to the highest release below the current one (atomically, like a deploy),
   keeps every release directory and appends `r<current> -> r<previous>` to
   releases/HOST/ROLLBACKS; when there is no earlier release it exits 1 and changes nothing.
2. Roll the change out to web1 and web2: deploy each host, validate its new current release, and
   roll back every host whose release fails validation (keep the failed release for the
   post-mortem)."""
  solve = _steps(
    "cat deploy/vars/common.env; sed -n '1,12p' deploy/validate.py; ls -l releases/*/",
    _tool("deploy/deploy.py", DEPLOY_V2),
    ROLLOUT_VALIDATED,
    "test -s releases/web2/ROLLBACKS && python3 deploy/validate.py "
    "releases/web1/current && ls -l releases/*/current && cat releases/web2/ROLLBACKS",
  )
  # Plausible wrong: the rollout without validating (web2 keeps its clashing release).
  wrong = patched(solve, (ROLLOUT_VALIDATED, ROLLOUT))
  return TaskSpec(
    instruction,
    ROLLBACK_CHECK,
    solve,
    wrong,
    files={
      "deploy/validate.py": VALIDATE,
      "deploy/vars/common.env": _env_text(rng, common, "shared by every host"),
    },
    data={
      "fixture": fx,
      "change": specs[-1].data["change"],
      "web1": _render(cfg, "web1"),
      "web2": _render(cfg, "web2"),
    },
    complexity="complex",
    language="python",
  )


SECRETS_CHECK = (
  CHECK_COMMON
  + """
fx = DATA["fixture"]
tmp, p = render_fixture(fx)
modes("render.py output", tmp + "/out", DATA["fixture_modes"])
if DATA["token"] in p.stdout + p.stderr:
  fail("render.py printed a secret value")
render_fails(fx, {}, "token", drop=["deploy/secrets/token"])
release("web1", "r2", DATA["r2"])
modes("releases/web1/r2", "releases/web1/r2", DATA["modes"])
if current("web1") != "r2":
  fail("releases/web1/current should point to the new release r2")
"""
)


def secrets(rng: random.Random, level: int, specs: Sequence[TaskSpec]) -> TaskSpec:
  cfg = dict(specs[-1].data["config"])
  pool = "pool = ${DB_POOL:-5}\n"
  app = cfg["templates"]["app.ini.tmpl"].replace(pool, pool + SECRET_LINE, 1)
  cfg["templates"] = {**cfg["templates"], "app.ini.tmpl": app}
  cfg["secrets"] = {"db_password": util.token(rng, (12, 20, 32)[level])}
  fx = _fixture(rng, secrets=True)
  instruction = """Our configuration (deploy/templates/*.tmpl, deploy/vars/common.env,
deploy/hosts/<host>.env) is rendered by deploy/render.py (`render.py [--config DIR] HOST OUTDIR`;
${NAME}, ${NAME:-default}, $$; exit 2 and no OUTDIR on an undefined variable) and web1 runs the
release releases/web1/r1 (releases/web1/current, a relative symlink). The database password must
no longer live in a template: app.ini.tmpl now says ${secret:db_password}.
1. Extend render.py: `${secret:NAME}` is the content of DIR/secrets/NAME without its trailing
   newline; a missing secret file is an error like an undefined variable (exit 2, stderr names
   the secret, no OUTDIR). A rendered file that contains a secret is written with mode 0600, every
   other rendered file 0644. Never print a secret's value.
2. Redeploy web1 as the new release releases/web1/r2 and switch releases/web1/current to it (keep
   r1 as it is)."""
  solve = _steps(
    "grep -n secret deploy/templates/*.tmpl; ls -l deploy/secrets",
    _tool("deploy/render.py", RENDER_SECRETS),
    "python3 deploy/render.py web1 releases/web1/r2 && ln -sfn r2 releases/web1/current",
    "test -h releases/web1/current && stat -c '%a %n' releases/web1/r2/*",
  )
  # Plausible wrong: the secrets are rendered, but every file keeps the default mode.
  wrong = patched(solve, ("0o600 if name in secret else 0o644", "0o644"))
  names = _render(cfg, "web1")
  return TaskSpec(
    instruction,
    SECRETS_CHECK,
    solve,
    wrong,
    files={
      "deploy/templates/app.ini.tmpl": app,
      "deploy/secrets/db_password": cfg["secrets"]["db_password"] + "\n",
    },
    setup="chmod 700 deploy/secrets && chmod 600 deploy/secrets/db_password",
    data={
      "fixture": fx,
      "token": fx["config"]["secrets"]["token"],
      "fixture_modes": {n: 0o600 if n == "secret.conf" else 0o644 for n in fx["want"]},
      "r2": names,
      "modes": {n: 0o600 if n == "app.ini" else 0o644 for n in names},
    },
    complexity="moderate",
    language="python",
  )


ROOT = Family(
  "config_render",
  "system_administration",
  "exact_text",
  "text_only",
  config_render,
  skills=("templating", "deployment", "configuration management"),
)
FAMILIES = (ROOT,)
CHAIN = ChainFamily(
  name="config_fleet",
  goal="render and roll out our services' configuration to every host",
  root=ROOT,
  root_requirement="a template renderer and the first host's release",
  extensions=(
    Extension(
      "host_overrides",
      ("config_render",),
      "a second host with template overrides; an idempotent deploy tool",
      host_overrides,
    ),
    Extension(
      "rollback",
      ("host_overrides",),
      "a validated rollout that rolls back the host whose release fails",
      rollback,
    ),
    Extension(
      "secrets", ("config_render",), "secrets from files, rendered 0600; redeploy", secrets
    ),
  ),
)
