-- renew a lease: A(1) token, A(2) lease_s, A(3) batch. Returns 'lost' or the batch's state.
if not redis.call('ZSCORE', P .. ':leases', A(1)) then return 'lost' end
redis.call('ZADD', P .. ':leases', 'XX', now() + tonumber(A(2)), A(1))
return redis.call('HGET', P .. ':b:' .. A(3), 'state') or 'lost'
