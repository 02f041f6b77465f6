"""Reward farm: an elastic, multi-tenant reward service for RL training (after DistRS, NSDI'26)."""

__version__ = "0.1.0"
