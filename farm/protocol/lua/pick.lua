-- a free worker takes the most urgent pending request of its stage (`mode`: ebf|fcfs) and a lease on it, of a
-- tenant its fair share lets it serve (farm.protocol.shares: `kind` the stage's resource kind, `kind_queues` the
-- stage queues of that kind, comma-separated, where a tenant's cap counts its workers).
-- Returns {requeued queues, batch, request, enqueued_at, state, payload, task, pipeline}, or {requeued
-- queues} when nothing waits (or only tenants at their cap wait: the token is then held, see `release_held`).
-- A worker serving on (workers.stage) takes the wake-up token of the request it picks from the broker's list, as
-- Celery would have delivered it to some worker: one token, one pick, as ever. Nothing is picked when the list
-- holds none (each waiting request's token is in a worker's hands already), when the worker is retiring (it
-- takes no more requests), or when the broker is not this Redis. Only this stage's tokens are on its list; a
-- message that is not one goes back where it was.
if take_token == '1' then
  if not LUA_TOKENS or redis.call('HEXISTS', queue_key(queue, QPART.leaving), worker) == 1 then return {{}} end
  local message = redis.call('RPOP', broker_key(queue))
  if not message then return {{}} end
  if not string.find(message, '"' .. TASK_PREFIX .. queue .. '"', 1, true) then
    redis.call('RPUSH', broker_key(queue), message)
    return {{}}
  end
end
local requeued = reclaim(tonumber(reclaim_limit), tonumber(max_attempts))
local z = queue_key(queue, mode)  -- a scheduler picks from the order of its name: QPART.ebf or QPART.fcfs
local fcfs = queue_key(queue, QPART.fcfs)
-- of batches with equal keys (one decision may key every batch without history alike), the one whose head
-- entered the stage first, as the simulation serves them; `bids` all have the key `score`
local function first_in(bids)
  local best, best_seq = nil, nil
  for _, bid in ipairs(bids) do
    local seq = tonumber(redis.call('ZSCORE', fcfs, bid))
    if seq and (best_seq == nil or seq < best_seq) then best, best_seq = bid, seq end
  end
  return best or bids[1]
end
-- the most urgent batch of one tenant alone: the first of the order (`members`, with scores), ties by their
-- heads' seq
local function most_urgent(members)
  if #members < 4 or z == fcfs or members[2] ~= members[4] then return members[1] end
  local tied = {}
  for i = 1, #members, 2 do
    if members[i + 1] ~= members[2] then break end
    tied[#tied + 1] = members[i]
  end
  return first_in(tied)
end
-- the most urgent batch of the tenants a fair share lets this worker serve (`shares.eligible` in Python);
-- false when only capped tenants wait
local function fair_pick(members)
  local waiting, seen_t = {}, {}
  for i = 1, #members, 2 do
    local t = tenant_of(members[i])
    if not seen_t[t] then seen_t[t] = true; waiting[#waiting + 1] = t end
  end
  local shares = {}
  for _, t in ipairs(waiting) do shares[t] = share_of(t) end
  local held_for = reserving(queue, seen_t)
  if #waiting == 1 and shares[waiting[1]].cap[kind] == nil and #held_for == 0 then return most_urgent(members) end
  for _, t in ipairs(held_for) do shares[t] = share_of(t) end
  local use = busy_by_tenant({queue})
  local kind_use = use
  for t, s in pairs(shares) do
    if s.cap[kind] ~= nil then kind_use = busy_by_tenant(split(kind_queues, ',')); break end
  end
  -- the picking worker is one of them, even if its last beat is older than `roster_s`
  local workers = math.max(stage_workers(queue, tonumber(roster_s)),
                          redis.call('HLEN', queue_key(queue, QPART.busy)) + 1)
  local total = 0
  for _, t in pairs(shares) do total = total + t.w end  -- the capped ones count too: their share stays theirs
  local open_t, under, n_under = {}, {}, 0
  for _, t in ipairs(waiting) do
    local cap = shares[t].cap[kind]
    if cap == nil or (kind_use[t] or 0) < cap then
      open_t[#open_t + 1] = t
      if (use[t] or 0) < workers * shares[t].w / total then under[t] = true; n_under = n_under + 1 end
    end
  end
  if #open_t == 0 then return false end
  if n_under == 0 then
    for _, t in ipairs(held_for) do  -- the worker is held for a reserving tenant under its share
      local cap = shares[t].cap[kind]
      if (cap == nil or (kind_use[t] or 0) < cap) and (use[t] or 0) < workers * shares[t].w / total then
        return false
      end
    end
  end
  if n_under == 0 then  -- rounding left none under (one worker, two tenants): those furthest below
    local least = nil
    for _, t in ipairs(open_t) do
      local r = (use[t] or 0) / shares[t].w
      if least == nil or r < least then least = r end
    end
    for _, t in ipairs(open_t) do
      if (use[t] or 0) / shares[t].w == least then under[t] = true end
    end
  end
  local found, score, tied = nil, nil, {}
  for i = 1, #members, 2 do
    if under[tenant_of(members[i])] then
      if found == nil then found, score = members[i], members[i + 1]; tied[1] = found
      elseif members[i + 1] == score then tied[#tied + 1] = members[i]
      else break end
    end
  end
  if #tied > 1 and z ~= fcfs then return first_in(tied) end
  return found
end
local function choose()
  local members = redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
  if #members == 0 then return nil end
  local bid = fair_pick(members)
  if bid == false then
    redis.call('HINCRBY', K.held, queue, 1)  -- its token is handed back at a release (common.lua)
    return nil
  end
  return bid
end
while true do
  local bid = choose()
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
