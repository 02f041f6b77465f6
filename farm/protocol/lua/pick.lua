-- a free worker takes the most urgent pending request of its stage (`mode`: ebf|fcfs) and a lease on it.
-- Returns {requeued queues, batch, request, enqueued_at, state, payload, task, pipeline}, or {requeued
-- queues} when nothing waits.
local requeued = reclaim(tonumber(reclaim_limit), tonumber(max_attempts))
local z = qkey(queue, mode)
while true do
  local top = redis.call('ZRANGE', z, 0, 0)
  if #top == 0 then return {requeued} end
  local bid = top[1]
  local l = qkey(queue, 'l:' .. bid)
  local entry = redis.call('LPOP', l)
  if entry then
    local head = redis.call('LINDEX', l, 0)
    if head then
      redis.call('ZADD', qkey(queue, 'fcfs'), entry_seq(head), bid)
    else
      redis.call('ZREM', qkey(queue, 'ebf'), bid)
      redis.call('ZREM', qkey(queue, 'fcfs'), bid)
    end
    local b = P .. ':b:' .. bid
    local seq, enq_at, rid = parse_entry(entry)
    local t = now()
    redis.call('ZADD', P .. ':leases', t + tonumber(lease_s), token)
    redis.call('HSET', P .. ':lease', token, lease_info(queue, bid, worker, seq, enq_at, rid))
    redis.call('HSET', b .. ':lease', rid, token)
    redis.call('HSET', qkey(queue, 'busy'), worker, busy_record(bid, rid, t, token))
    redis.call('HSET', qkey(queue, 'seen'), worker, tostring(t))
    local info = redis.call('HMGET', b, 'task', 'pipeline')
    return {requeued, bid, rid, enq_at, redis.call('HGET', b .. ':req', rid), redis.call('HGET', b .. ':payload', rid), info[1], info[2]}
  end
  redis.call('ZREM', qkey(queue, 'ebf'), bid)
  redis.call('ZREM', qkey(queue, 'fcfs'), bid)
end
