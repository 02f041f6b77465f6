-- cancel a batch: pending requests leave the queues; every unfinished request gets a `cancelled` result
-- now (a running one's late completion is discarded).
local b = P .. ':b:' .. batch
local current = redis.call('HGET', b, 'state')
if not current then return 'unknown' end
if current ~= 'open' then return current end
redis.call('HSET', b, 'state', 'cancelling')
for _, q in ipairs(split(redis.call('HGET', b, 'queues'), ',')) do drop_from_queue(q, batch) end
for _, rid in ipairs(redis.call('HKEYS', b .. ':req')) do
  if redis.call('HEXISTS', b .. ':res', rid) == 0 then
    finish_here(batch, rid, 'cancelled', 'batch cancelled', nil, at, nil, false)
  end
end
close_batch(batch, 'cancelled', at)
return 'cancelled'
