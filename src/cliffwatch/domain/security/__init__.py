"""Where load may go and what may be shown: allowlist and deny list, redaction, secrets as references."""
