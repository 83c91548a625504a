"""Pure core: scenario values and validation, arrival plans, outcomes, metrics, scoring. No I/O, no clock."""
