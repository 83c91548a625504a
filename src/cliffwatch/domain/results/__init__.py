"""What a run measured and how it is judged: outcomes, metrics, histograms, scoring, isolation, the result."""
