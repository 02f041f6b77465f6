-- a worker finished a stage of a request it leased. With a `next_queue` the request moves on there with
-- its new `state` (`limit`: that stage's hard time limit); with '' it finishes with `result` and
-- `done_event`. A late completion of a lapsed lease is discarded ('lost').
local b = batch_key(batch)
local busy = queue_key(queue, QPART.busy)
local held = redis.call('HGET', busy, worker)
if held and string.find(held, token, 1, true) then redis.call('HDEL', busy, worker); release_held() end
redis.call('HSET', queue_key(queue, QPART.seen), worker, at)
if redis.call('HGET', b .. PART.lease, request) ~= token then return 'lost' end
redis.call('HDEL', b .. PART.lease, request)
redis.call('ZREM', K.leases, token)
redis.call('HDEL', K.lease, token)
emit(stage_event)
local f = redis.call('HMGET', b, 'state', 'key')
if f[1] ~= 'open' then return 'discarded' end
if next_queue ~= '' then
  redis.call('HSET', b .. PART.req, request, state)
  enqueue(next_queue, batch, request, redis.call('INCR', K.seq), at, false, f[2], limit)
  return 'next'
end
if finish(batch, request, result, done_event, at, true) == 0 then return 'duplicate' end
return 'finished'
