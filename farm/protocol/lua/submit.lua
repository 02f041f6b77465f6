-- submit a request: A(1) batch, A(2) request, A(3) payload JSON, A(4) request state JSON, A(5) first
-- stage queue ('' = visits none), A(6) now, A(7) result JSON (when it visits none), A(8) request_arrived
-- event, A(9) request_done event, A(10) group ('' = none), A(11) the first stage's hard time limit
local bid, rid, payload = A(1), A(2), A(3)
local b = P .. ':b:' .. bid
local f = redis.call('HMGET', b, 'state', 'size', 'arrived', 'key')
if not f[1] then return {'unknown'} end
local old = redis.call('HGET', b .. ':payload', rid)
if old then
  if old == payload then return {'duplicate'} end
  return {'conflict'}
end
if f[1] ~= 'open' then return {'closed', f[1]} end
if tonumber(f[3]) >= tonumber(f[2]) then return {'full', f[2]} end
redis.call('HSET', b .. ':payload', rid, payload)
redis.call('HSET', b .. ':req', rid, A(4))
redis.call('HINCRBY', b, 'arrived', 1)
if A(10) ~= '' then redis.call('HINCRBY', b .. ':groups', A(10), 1) end
emit(A(8))
if A(5) ~= '' then
  enqueue(A(5), bid, rid, redis.call('INCR', P .. ':seq'), A(6), false, f[4], A(11))
  return {'queued'}
end
finish(bid, rid, A(7), A(9), A(6), true)
return {'finished'}
