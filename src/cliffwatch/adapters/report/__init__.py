"""Run reports: one self-contained HTML file from a run result document (uPlot charts, data inlined)."""
