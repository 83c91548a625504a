"""The workload as it will be sent: prompt sizing (and, to come, the prepared run)."""
