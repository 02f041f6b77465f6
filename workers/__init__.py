"""Stage workers, the sandbox for untrusted code, and the reward pipelines."""
