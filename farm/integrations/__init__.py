"""Adapters between RL trainers and the farm, one trainer per module; each is an optional extra.

This package imports nothing on its own: `farm.integrations.trl` needs `reward-farm[trl]`,
`farm.integrations.verl_manager` needs `reward-farm[verl]`, and the trainer's core (`farm`, `farm.client`)
never imports any of them. docs/integrations.md has the configuration to copy for each trainer.
"""
