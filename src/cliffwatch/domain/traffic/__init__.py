"""How load is sent: plans and shards, the attempt cap's rate limit, generator health, clock agreement, the Ray
address."""
