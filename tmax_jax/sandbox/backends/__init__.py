"""The sandbox backends, each loaded when used (tmax_jax.sandbox.open_sandbox / open_pod pick one):
bubblewrap (namespaces), podman (runc containers) and its pods (several containers on one
network), apptainer (clusters). All share sandbox/base.py's lifecycle; the two container kinds
share podman.hardened_run_args."""
