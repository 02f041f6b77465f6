-- a free worker takes the most urgent pending request of its stage and a lease on it:
-- A(1) queue, A(2) mode (ebf|fcfs), A(3) worker, A(4) lease_s, A(5) lease token, A(6) reclaim limit,
-- A(7) max attempts. Returns {requeued queues, batch, request, enqueued_at, state, payload, task, pipeline}.
local queue, mode, worker, token = A(1), A(2), A(3), A(5)
local requeued = reclaim(tonumber(A(6)), tonumber(A(7)))
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
      redis.call('ZADD', qkey(queue, 'fcfs'), tonumber(string.match(head, '^(%d+)|')), bid)
    else
      redis.call('ZREM', qkey(queue, 'ebf'), bid)
      redis.call('ZREM', qkey(queue, 'fcfs'), bid)
    end
    local b = P .. ':b:' .. bid
    local seq, enq_at, rid = string.match(entry, '^(%d+)|([^|]*)|(.*)$')
    local t = now()
    redis.call('ZADD', P .. ':leases', t + tonumber(A(4)), token)
    redis.call('HSET', P .. ':lease', token, queue .. '|' .. bid .. '|' .. worker .. '|' .. seq .. '|' .. enq_at .. '|' .. rid)
    redis.call('HSET', b .. ':lease', rid, token)
    redis.call('HSET', qkey(queue, 'busy'), worker, cjson.encode({batch = bid, request = rid, started_at = t, token = token}))
    redis.call('HSET', qkey(queue, 'seen'), worker, tostring(t))
    local info = redis.call('HMGET', b, 'task', 'pipeline')
    return {requeued, bid, rid, enq_at, redis.call('HGET', b .. ':req', rid), redis.call('HGET', b .. ':payload', rid), info[1], info[2]}
  end
  redis.call('ZREM', qkey(queue, 'ebf'), bid)
  redis.call('ZREM', qkey(queue, 'fcfs'), bid)
end
