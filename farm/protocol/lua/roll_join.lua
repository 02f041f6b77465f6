-- a sample joins the tenant's rolling batch of `protocol` (farm.app.gateway.rolling): the current one until it
-- holds `size` samples or none came for `rollover` seconds, then the next. A sample seen before joins the batch
-- and request it joined then (its key lasts `ttl` seconds), unless what it joined then is `stale` (the caller
-- saw that request's result must not be replayed): then it joins afresh as `request`. `epoch`: the tenant's
-- first batch's epoch, when it has none yet. A new sample also puts the state among those the idle check watches
-- (K.rolls); a sample seen before changes no state, so it leaves the set as it is.
-- Returns {index, epoch, index to seal or -1, request, what the sample is joined as (`stale` names it), 1 if seen before};
-- {'limit', outstanding} when it would join as a new request while its tenant already has `most_outstanding`
-- requests outstanding ('' = no limit; the submit checks it again as the request arrives).
local state, joined = roll_key(tenant, protocol), roll_sample_key(tenant, protocol, sample)
local known = redis.call('GET', joined)
if known and known ~= stale then
  local first = string.find(known, ':', 1, true)
  local second = string.find(known, ':', first + 1, true)
  local rid = second and string.sub(known, second + 1) or string.sub(sample, 1, 32)  -- a key from before requests were kept
  return {tonumber(string.sub(known, first + 1, (second or 0) - 1)), string.sub(known, 1, first - 1), -1, rid, known, 1}
end
if most_outstanding ~= '' then
  local n = outstanding(tenant)
  if n >= tonumber(most_outstanding) then return {'limit', n} end
end
local t, most, idle = tonumber(at), tonumber(size), tonumber(rollover)
local f = redis.call('HMGET', state, 'epoch', 'index', 'count', 'last')
local current, index, count, last = f[1], tonumber(f[2] or '0'), tonumber(f[3] or '0'), tonumber(f[4] or '0')
if not current then current = epoch end
local seal = -1
if count > 0 and (count >= most or t - last > idle) then
  if count < most then seal = index end
  index, count = index + 1, 0
end
redis.call('HSET', state, 'epoch', current, 'index', index, 'count', count + 1, 'last', t, 'size', most,
           'rollover', idle)
redis.call('SADD', K.rolls, state)  -- a state the idle check watches (roll_idle.lua), with the sample that filled it
local value = current .. ':' .. index .. ':' .. request
redis.call('SET', joined, value, 'EX', ttl)
return {index, current, seal, request, value, 0}
