"""The process itself: its clock, logs, child processes, file descriptors, the secrets it may read,
and the built-in target it starts."""
