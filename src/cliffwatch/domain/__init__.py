"""Pure core: scenario values and validation, arrival plans, outcomes, metrics and scoring. No I/O, no clock."""
