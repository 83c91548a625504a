"""Where connections may go: this host's own addresses and the control planes of this process (the deny list's
runtime half); ``adapters/network/target_access.py`` checks and pins each place a run connects to."""
