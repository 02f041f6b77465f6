-- seal the tenant's rolling batch of `protocol` when it is partly filled and idle (no sample for the rollover
-- time the last sample brought): returns {its index, epoch}, the next sample opening the next batch; else
-- {-1, epoch}. A state left with nothing to seal (sealed here, or empty, or full) leaves the gateway's set of
-- states to watch (K.rolls): the next sample to join puts it back, so an idle gateway has nothing to look at.
local state = roll_key(tenant, protocol)
local f = redis.call('HMGET', state, 'epoch', 'index', 'count', 'last', 'size', 'rollover')
if not f[1] then
  redis.call('SREM', K.rolls, state)
  return {-1, ''}
end
local index, count, last, size = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5])
if count > 0 and count < size then
  if tonumber(at) - last > tonumber(f[6]) then
    redis.call('HSET', state, 'index', index + 1, 'count', 0)
    redis.call('SREM', K.rolls, state)
    return {index, f[1]}
  end
  return {-1, f[1]}
end
redis.call('SREM', K.rolls, state)
return {-1, f[1]}
