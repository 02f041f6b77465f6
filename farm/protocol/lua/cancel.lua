-- cancel a batch: A(1) batch, A(2) now. Pending requests leave the queues; every unfinished request
-- gets a `cancelled` result now (a running one's late completion is discarded).
local bid, at = A(1), A(2)
local b = P .. ':b:' .. bid
local state = redis.call('HGET', b, 'state')
if not state then return 'unknown' end
if state ~= 'open' then return state end
redis.call('HSET', b, 'state', 'cancelling')
for _, q in ipairs(split(redis.call('HGET', b, 'queues'), ',')) do drop_from_queue(q, bid) end
for _, rid in ipairs(redis.call('HKEYS', b .. ':req')) do
  if redis.call('HEXISTS', b .. ':res', rid) == 0 then
    finish_here(bid, rid, 'cancelled', 'batch cancelled', nil, at, nil, false)
  end
end
close_batch(bid, 'cancelled', at)
return 'cancelled'
