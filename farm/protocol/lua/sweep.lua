-- give lapsed leases back: A(1) limit, A(2) max attempts. Returns the queues that need a wake-up token each.
return reclaim(tonumber(A(1)), tonumber(A(2)))
