"""Trace-driven evaluation of the policy: the `reward-trace/1` format and its generator, a discrete-event
replay of a trace on elastic pools with the policy in the loop (`loop.evaluate`, after SimPy: the event
`kernel`, the simulated farm's `state`, one of the `handlers` per event kind), the metrics, and the
comparison figures of `farm eval --compare`. No I/O beyond reading and writing trace and figure files."""
