-- a worker finished a stage of a request it leased: A(1) batch, A(2) request, A(3) token, A(4) worker,
-- A(5) queue, A(6) now, A(7) stage_done event, A(8) next queue ('' = last stage), A(9) new request state,
-- A(10) result JSON, A(11) request_done event, A(12) the next stage's hard time limit. A late completion of a lapsed lease is discarded.
local bid, rid, token, worker, queue, at = A(1), A(2), A(3), A(4), A(5), A(6)
local b = P .. ':b:' .. bid
local busy = qkey(queue, 'busy')
local held = redis.call('HGET', busy, worker)
if held and string.find(held, token, 1, true) then redis.call('HDEL', busy, worker) end
redis.call('HSET', qkey(queue, 'seen'), worker, at)
if redis.call('HGET', b .. ':lease', rid) ~= token then return 'lost' end
redis.call('HDEL', b .. ':lease', rid)
redis.call('ZREM', P .. ':leases', token)
redis.call('HDEL', P .. ':lease', token)
emit(A(7))
local f = redis.call('HMGET', b, 'state', 'key')
if f[1] ~= 'open' then return 'discarded' end
if A(8) ~= '' then
  redis.call('HSET', b .. ':req', rid, A(9))
  enqueue(A(8), bid, rid, redis.call('INCR', P .. ':seq'), at, false, f[2], A(12))
  return 'next'
end
if finish(bid, rid, A(10), A(11), at, true) == 0 then return 'duplicate' end
return 'finished'
