-- give lapsed leases back. Returns the queues that need a wake-up token each.
return reclaim(tonumber(reclaim_limit), tonumber(max_attempts))
