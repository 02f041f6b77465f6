-- a free worker takes the most urgent pending request of its stage (`mode`: ebf|fcfs) and a lease on it.
-- Returns {requeued queues, batch, request, enqueued_at, state, payload, task, pipeline}, or {requeued
-- queues} when nothing waits.
local requeued = reclaim(tonumber(reclaim_limit), tonumber(max_attempts))
local z = queue_key(queue, mode)  -- a scheduler picks from the order of its name: QPART.ebf or QPART.fcfs
while true do
  local top = redis.call('ZRANGE', z, 0, 0)
  if #top == 0 then return {requeued} end
  local bid = top[1]
  local l = queue_key(queue, QPART.pending .. bid)
  local entry = redis.call('LPOP', l)
  if entry then
    local head = redis.call('LINDEX', l, 0)
    if head then
      redis.call('ZADD', queue_key(queue, QPART.fcfs), entry_seq(head), bid)
    else
      redis.call('ZREM', queue_key(queue, QPART.ebf), bid)
      redis.call('ZREM', queue_key(queue, QPART.fcfs), bid)
    end
    local b = batch_key(bid)
    local seq, enq_at, rid = parse_entry(entry)
    local t = now()
    redis.call('ZADD', K.leases, t + tonumber(lease_s), token)
    redis.call('HSET', K.lease, token, lease_info(queue, bid, worker, seq, enq_at, rid))
    redis.call('HSET', b .. PART.lease, rid, token)
    redis.call('HSET', queue_key(queue, QPART.busy), worker, busy_record(bid, rid, t, token))
    redis.call('HSET', queue_key(queue, QPART.seen), worker, tostring(t))
    local info = redis.call('HMGET', b, 'task', 'pipeline')
    return {requeued, bid, rid, enq_at, redis.call('HGET', b .. PART.req, rid), redis.call('HGET', b .. PART.payload, rid), info[1], info[2]}
  end
  redis.call('ZREM', queue_key(queue, QPART.ebf), bid)
  redis.call('ZREM', queue_key(queue, QPART.fcfs), bid)
end
