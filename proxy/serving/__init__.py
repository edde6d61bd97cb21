"""What the proxy process serves with, beside the sessions: config reloads so far."""
