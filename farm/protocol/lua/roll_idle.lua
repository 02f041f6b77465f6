-- seal the tenant's rolling batch of `protocol` when it is partly filled and idle (no sample for the rollover
-- time the last sample brought): returns {its index, epoch}, the next sample opening the next batch; else
-- {-1, epoch}.
local state = roll_key(tenant, protocol)
local f = redis.call('HMGET', state, 'epoch', 'index', 'count', 'last', 'size', 'rollover')
if not f[1] then return {-1, ''} end
local index, count, last, size = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5])
if count > 0 and count < size and tonumber(at) - last > tonumber(f[6]) then
  redis.call('HSET', state, 'index', index + 1, 'count', 0)
  return {index, f[1]}
end
return {-1, f[1]}
