"""Harbor (the Terminal-Bench harness) and tmax_jax, both ways (README "Harbor").

Runs in the project's Python (3.11): venv (the Harbor venv), sandbox (`harbor:<type>` runner
backend through a bridge process), tasks and oci (Harbor views of tasks, our images in podman),
jobs (running Harbor, reading its results), trajectories (ATIF -> SFT records), run (serve a
model and run Harbor against it), agreement. Runs only in the Harbor venv (Python >= 3.12, imports
Harbor): environment (the plugin), bridge, export. protocol is shared by both sides.
"""
