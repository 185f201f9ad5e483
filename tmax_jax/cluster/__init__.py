"""Placement beyond one host on Ray: node roles, inference replicas on their own nodes.

Ray is an optional dependency (`pip install -e ".[cluster]"`); nothing outside this package
imports it, so single-host runs neither need nor load it. Importing the package without Ray is
one UserError saying how to install it.

  roles.py    what a node is for, as a Ray custom resource (`ray start --resources=...`);
              connecting to a running cluster
  replica.py  one inference server (launch/serve.py) as a Ray actor's child process
  fleet.py    N replicas on the `inference` nodes, the router in front, restarts followed
  trainer.py  the RL job's trainer processes on the `trainer` nodes, one gang
  sandbox_host.py   one sandbox host: a Ray actor opening sandboxes on a `sandbox` node
  sandbox_hosts.py  the hosts placed, leased (leases.py) and used through a Sandbox proxy
"""

from tmax_jax.errors import UserError

try:
  import ray  # noqa: F401  (the one check that Ray is there, before any submodule needs it)
except ModuleNotFoundError as e:
  raise UserError(
    "ray is not installed; tmax_jax.cluster needs it: pip install -e '.[cluster]' "
    "(or pip install ray==2.60.0)"
  ) from e
