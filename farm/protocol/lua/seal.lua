-- seal a batch: it takes no more requests and its size becomes what has arrived, for a window that closes
-- by time rather than by size. It completes once those arrived have their results (at once if they have);
-- an empty one has nothing to learn from and is cancelled. Returns {'sealed', size}, {'completed', size},
-- {'cancelled'}, {state} when it was no longer open, or {'unknown'}.
local b = batch_key(batch)
local f = redis.call('HMGET', b, 'state', 'arrived', 'done')
if not f[1] then return {'unknown'} end
if f[1] ~= 'open' then return {f[1]} end
local arrived = tonumber(f[2])
if arrived == 0 then
  redis.call('HSET', b, 'state', 'cancelling')
  for _, q in ipairs(split(redis.call('HGET', b, 'queues'), ',')) do drop_from_queue(q, batch) end
  close_batch(batch, 'cancelled', at)
  return {'cancelled'}
end
redis.call('HSET', b, 'size', arrived, 'sealed', '1')
touch(batch)  -- its trainer, alive, now waits for what arrived
emit('{"kind":"batch_sealed","batch":' .. cjson.encode(batch) .. ',"size":' .. arrived .. ',"sealed_at":' .. at .. '}')
if tonumber(f[3]) >= arrived then
  close_batch(batch, 'completed', at)
  return {'completed', arrived}
end
return {'sealed', arrived}
