"""The application, above everything else: the `farm` command (`cli`), the embedded farm that runs on one
machine with no servers (`embedded`), the demo, and the live replay of a trace against a running farm.
It may import every layer; no layer imports it."""
