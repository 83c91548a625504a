"""Reading what a scenario names: its data files (below the data directories), datasets and traces."""
