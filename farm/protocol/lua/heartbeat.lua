-- renew a lease for `lease_s` more seconds. Returns 'lost' or the batch's state.
if not redis.call('ZSCORE', P .. ':leases', token) then return 'lost' end
redis.call('ZADD', P .. ':leases', 'XX', now() + tonumber(lease_s), token)
return redis.call('HGET', P .. ':b:' .. batch, 'state') or 'lost'
