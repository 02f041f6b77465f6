-- renew a lease for `lease_s` more seconds. Returns 'lost' or the batch's state. With a `queue`, the worker's
-- roster entry too (its `seen` time `at`, as roster.beat writes it): a busy worker's beat is one round trip.
if queue ~= '' then redis.call('HSET', queue_key(queue, QPART.seen), worker, at) end
if not redis.call('ZSCORE', K.leases, token) then return 'lost' end
redis.call('ZADD', K.leases, 'XX', now() + tonumber(lease_s), token)
return redis.call('HGET', batch_key(batch), 'state') or 'lost'
