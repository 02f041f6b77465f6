"""Trace-driven evaluation of the policy: the `reward-trace/1` format and its generator, a discrete-event
replay of a trace on elastic pools with the policy in the loop (`loop.evaluate`), the metrics, and the
comparison figures of `farm eval --compare`. No I/O beyond reading and writing trace and figure files."""
