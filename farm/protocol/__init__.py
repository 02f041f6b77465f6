"""Exact Earliest Batch First on Redis: the farm's own index of pending requests, leases and results.

Broker priorities cannot reorder queued messages, so a Celery message is only a wake-up token: the
worker that takes it picks, atomically in one Lua call, the most urgent pending request of its stage.
Per stage queue the index holds a sorted set of batches by EBF key (estimated completion, the open
time until the planner sets one), another by the enqueue order of each batch's head (the `fcfs`
mode), and a FIFO of pending requests per batch. Every state change appends its history event in the
same script.

The shapes Python and Lua share are defined once here: the keys (`keys`), the wake-up token
(`tokens`), the scripts and their arguments (`scripts`, `calls`); `live` reads the state back, `reads` a
batch for any reader, `roster` keeps the stages' workers, and `dispatch` runs the scripts synchronously.
Calls are built without I/O so every client flavour shares them.
"""
