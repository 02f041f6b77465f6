-- a worker its backend saw die: the lease it held lapses now instead of lease_s after its last heartbeat, so
-- the next sweep or pick puts the request back (counted as a lost worker, as a lapse by time is), and it leaves its
-- stage's roster now rather than roster.fresh_s after its last beat (a fair share no longer divides it). Idempotent;
-- a worker holding nothing (retired after finishing, or already reclaimed) gives back no lease.
redis.call('HDEL', queue_key(queue, QPART.seen), worker)
redis.call('HDEL', queue_key(queue, QPART.leaving), worker)
local held = redis.call('HGET', queue_key(queue, QPART.busy), worker)
if not held then return 0 end
local h = cjson.decode(held)
if not redis.call('ZSCORE', K.leases, h.token) then return 0 end
redis.call('ZADD', K.leases, 'XX', 0, h.token)
return 1
