-- a sample the farm refused after it joined the tenant's rolling batch of `protocol` (a limit): it leaves, so the
-- batch waits for no request that will never arrive. Returns the index of a batch to seal, else -1: the batch it
-- joined when no sample is left in it (empty: sealing cancels it) or when it already rolled over without this one.
local state = roll_key(tenant, protocol)
redis.call('DEL', roll_sample_key(tenant, protocol, sample))
local f = redis.call('HMGET', state, 'epoch', 'index', 'count')
local at = tonumber(index)
if f[1] ~= epoch or tonumber(f[2] or '-1') ~= at then return at end
local count = tonumber(f[3] or '0') - 1
if count > 0 then
  redis.call('HSET', state, 'count', count)
  return -1
end
redis.call('HSET', state, 'index', at + 1, 'count', 0)
return at
