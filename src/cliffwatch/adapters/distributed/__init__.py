"""Generator workers: shards of a run's plan sent from worker processes on this machine or from Ray actors across a
cluster's nodes, dealt, beaten and read by the run's coordinator."""
