"""Faults through Toxiproxy: its API client, the private server a run starts, the fault injector, and the fault
ledger that survives a crash."""
