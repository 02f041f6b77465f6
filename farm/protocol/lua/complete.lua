-- a worker finished a stage of a request it leased. With a `next_queue` the request moves on there with
-- its new `state` (`limit`: that stage's hard time limit); with '' it finishes with `result` and
-- `done_event`. A late completion of a lapsed lease is discarded ('lost').
local b = P .. ':b:' .. batch
local busy = qkey(queue, 'busy')
local held = redis.call('HGET', busy, worker)
if held and string.find(held, token, 1, true) then redis.call('HDEL', busy, worker) end
redis.call('HSET', qkey(queue, 'seen'), worker, at)
if redis.call('HGET', b .. ':lease', request) ~= token then return 'lost' end
redis.call('HDEL', b .. ':lease', request)
redis.call('ZREM', P .. ':leases', token)
redis.call('HDEL', P .. ':lease', token)
emit(stage_event)
local f = redis.call('HMGET', b, 'state', 'key')
if f[1] ~= 'open' then return 'discarded' end
if next_queue ~= '' then
  redis.call('HSET', b .. ':req', request, state)
  enqueue(next_queue, batch, request, redis.call('INCR', P .. ':seq'), at, false, f[2], limit)
  return 'next'
end
if finish(batch, request, result, done_event, at, true) == 0 then return 'duplicate' end
return 'finished'
