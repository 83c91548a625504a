"""The server's own view: metric expressions, engine profiles, the view and the evidence it gives, state headers."""
