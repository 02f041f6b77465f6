-- the hard time limit killed a worker's stage: finish the request it held with `status` and `message`.
local busy = queue_key(queue, QPART.busy)
local held = redis.call('HGET', busy, worker)
if not held then return 'idle' end
redis.call('HDEL', busy, worker)
release_held()
local h = cjson.decode(held)
local b = batch_key(h.batch)
if redis.call('HGET', b .. PART.lease, h.request) ~= h.token then return 'lost' end
redis.call('HDEL', b .. PART.lease, h.request)
redis.call('ZREM', K.leases, h.token)
local info = redis.call('HGET', K.lease, h.token)
redis.call('HDEL', K.lease, h.token)
local enq_at = info and select(5, parse_lease(info)) or tostring(h.started_at)
local stage = stage_of(queue)
local record = {name = stage, status = status, queued_at = tonumber(enq_at), started_at = h.started_at,
  finished_at = tonumber(at), seconds = tonumber(at) - h.started_at, worker = worker, message = message}
emit(cjson.encode({kind = 'stage_done', batch = h.batch, request = h.request, stage = stage,
  queued_at = tonumber(enq_at), started_at = h.started_at, finished_at = tonumber(at), status = status, worker = worker}))
if redis.call('HGET', b, 'state') ~= 'open' then return 'discarded' end
finish_here(h.batch, h.request, status, message, stage, at, record, true)
return 'finished'
