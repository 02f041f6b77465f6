-- the hard time limit killed a worker's stage: finish the request it held. A(1) worker, A(2) queue,
-- A(3) now, A(4) status, A(5) message.
local worker, queue, at = A(1), A(2), A(3)
local busy = qkey(queue, 'busy')
local held = redis.call('HGET', busy, worker)
if not held then return 'idle' end
redis.call('HDEL', busy, worker)
local h = cjson.decode(held)
local b = P .. ':b:' .. h.batch
if redis.call('HGET', b .. ':lease', h.request) ~= h.token then return 'lost' end
redis.call('HDEL', b .. ':lease', h.request)
redis.call('ZREM', P .. ':leases', h.token)
local info = redis.call('HGET', P .. ':lease', h.token)
redis.call('HDEL', P .. ':lease', h.token)
local enq_at = info and string.match(info, '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)|') or tostring(h.started_at)
local stage = string.match(queue, '^[^.]*%.(.*)$')
local record = {name = stage, status = A(4), queued_at = tonumber(enq_at), started_at = h.started_at,
  finished_at = tonumber(at), seconds = tonumber(at) - h.started_at, worker = worker, message = A(5)}
emit(cjson.encode({kind = 'stage_done', batch = h.batch, request = h.request, stage = stage,
  queued_at = tonumber(enq_at), started_at = h.started_at, finished_at = tonumber(at), status = A(4), worker = worker}))
if redis.call('HGET', b, 'state') ~= 'open' then return 'discarded' end
finish_here(h.batch, h.request, A(4), A(5), stage, at, record, true)
return 'finished'
