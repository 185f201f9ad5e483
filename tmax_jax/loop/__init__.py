"""Top-level jobs: the RL loop, SFT on trajectories, evaluation and the CPU demo."""
