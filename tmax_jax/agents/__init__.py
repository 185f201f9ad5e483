"""Agent harnesses and rollout workers (see formats/ for the message formats)."""
