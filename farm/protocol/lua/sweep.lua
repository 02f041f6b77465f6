-- give lapsed leases back, and abandon the batches whose trainer went silent (farm.protocol.silence). Returns the
-- queues that need a wake-up token each.
local requeued = reclaim(tonumber(reclaim_limit), tonumber(max_attempts))
abandon_silent(tonumber(abandon_after_s), tonumber(abandon_limit))
return requeued
