-- a free worker takes the most urgent pending request of its stage (`mode`: ebf|fcfs) and a lease on it.
-- Returns {requeued queues, batch, request, enqueued_at, state, payload, task, pipeline}, or {requeued
-- queues} when nothing waits.
local requeued = reclaim(tonumber(reclaim_limit), tonumber(max_attempts))
local z = queue_key(queue, mode)  -- a scheduler picks from the order of its name: QPART.ebf or QPART.fcfs
local fcfs = queue_key(queue, QPART.fcfs)
-- the most urgent batch: the first of the order; of batches with equal EBF keys (one decision may key every
-- batch without history alike), the one whose head entered the stage first, as the simulation serves them
local function most_urgent()
  local top = redis.call('ZRANGE', z, 0, 1, 'WITHSCORES')  -- the first two: a tie shows as equal scores
  if #top < 4 or z == fcfs or top[2] ~= top[4] then return top[1] end
  local best, best_seq = nil, nil
  for _, bid in ipairs(redis.call('ZRANGEBYSCORE', z, top[2], top[2])) do
    local seq = tonumber(redis.call('ZSCORE', fcfs, bid))
    if seq and (best_seq == nil or seq < best_seq) then best, best_seq = bid, seq end
  end
  return best or top[1]
end
while true do
  local bid = most_urgent()
  if bid == nil then return {requeued} end
  local l = queue_key(queue, QPART.pending .. bid)
  local entry = redis.call('LPOP', l)
  if entry then
    local head = redis.call('LINDEX', l, 0)
    if head then
      redis.call('ZADD', fcfs, entry_seq(head), bid)
    else
      redis.call('ZREM', queue_key(queue, QPART.ebf), bid)
      redis.call('ZREM', fcfs, bid)
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
  redis.call('ZREM', fcfs, bid)
end
