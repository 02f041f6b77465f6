"""Reward pipelines, one module each; `farm.registry` maps names to them."""
