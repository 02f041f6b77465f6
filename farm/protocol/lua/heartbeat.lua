-- renew a lease for `lease_s` more seconds. Returns 'lost' or the batch's state.
if not redis.call('ZSCORE', K.leases, token) then return 'lost' end
redis.call('ZADD', K.leases, 'XX', now() + tonumber(lease_s), token)
return redis.call('HGET', batch_key(batch), 'state') or 'lost'
