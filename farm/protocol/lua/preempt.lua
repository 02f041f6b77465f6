-- a reserving tenant's request waits at a stage whose workers the others hold: stop as many of their running
-- requests as farm.protocol.shares.preempted names (`kind` the stage's resource kind, `kind_queues` the stage
-- queues of that kind, comma-separated), put each back at the head of its batch, as a lapsed lease is but without
-- counting a lost worker, and tell its worker (`tell`), which beats at once, finds the lease gone and kills the
-- request's programs (workers.stage). Run by a busy worker that popped the stage's notice. Returns the
-- workers stopped, and the queue once per request put back: each needs a wake-up token, which the caller sends
-- where the broker is not this Redis (as a sweep's requeued queues do; `enqueue` publishes it otherwise).
local stopped, requeued = {}, {}
local any = false
for _, s in pairs(shares_published()) do if s.r then any = true; break end end
if not any then return {stopped, requeued} end
-- each tenant's requests waiting here, the most urgent tenant first (the stage's EBF order)
local want, order, seen_t = {}, {}, {}
for _, bid in ipairs(redis.call('ZRANGE', queue_key(queue, QPART.ebf), 0, -1)) do
  local t = tenant_of(bid)
  local n = redis.call('LLEN', queue_key(queue, QPART.pending .. bid))
  if n > 0 then
    if want[t] == nil then want[t] = 0; order[#order + 1] = t; seen_t[t] = true end
    want[t] = want[t] + n
  end
end
local wanted = false
for _, t in ipairs(order) do if share_of(t).r then wanted = true; break end end
if not wanted then return {stopped, requeued} end
local busy = queue_key(queue, QPART.busy)
local running, use = {}, {}  -- tenant -> {worker, started_at, token}; tenant -> its busy workers here
local all = redis.call('HGETALL', busy)
for i = 1, #all, 2 do
  local ok, rec = pcall(cjson.decode, all[i + 1])
  if ok and type(rec) == 'table' and type(rec.batch) == 'string' then
    local t = tenant_of(rec.batch)
    use[t] = (use[t] or 0) + 1
    running[t] = running[t] or {}
    running[t][#running[t] + 1] = {all[i], tonumber(rec.started_at) or 0, rec.token}
  end
end
local kind_use = busy_by_tenant(split(kind_queues, ','))
local held_for = reserving(queue, seen_t)
local workers = stage_workers(queue, tonumber(roster_s))
-- the tenants waiting, running or reserving here share the workers (shares.preempted)
local present, in_present = {}, {}
local function add(t) if not in_present[t] then in_present[t] = true; present[#present + 1] = t end end
for _, t in ipairs(order) do add(t) end
for t, n in pairs(use) do if n > 0 then add(t) end end
for _, t in ipairs(held_for) do add(t) end
local total = 0
for _, t in ipairs(present) do total = total + share_of(t).w end
local function entitled(t) return workers * share_of(t).w / total end
local free = workers
for _, n in pairs(use) do free = free - n end
local labels = {}
for t, _ in pairs(use) do labels[#labels + 1] = t end
table.sort(labels)
-- the one of `v`'s running requests that started last (the least work lost), ties by the worker's name
local function victim(v)
  local best = nil
  for j, r in ipairs(running[v]) do
    if best == nil or r[2] > running[v][best][2] or (r[2] == running[v][best][2] and r[1] > running[v][best][1]) then
      best = j
    end
  end
  return table.remove(running[v], best)
end
local function stop(worker, token)
  redis.call('HDEL', busy, worker)
  release_held()
  stopped[#stopped + 1] = worker
  local info = token and redis.call('HGET', K.lease, token)
  if not info then return end
  tell(token)
  local lease, again = end_lease(token, info)
  if again then
    redis.call('HINCRBY', K.counters, COUNT_PREEMPTED .. lease.queue, 1)  -- farm.protocol.counters
    put_back(lease)
    requeued[#requeued + 1] = lease.queue
  end
end
while true do
  local u, least = nil, nil
  for _, t in ipairs(order) do
    local s = share_of(t)
    local cap = s.cap[kind]
    if want[t] > 0 and s.r and (cap == nil or (kind_use[t] or 0) < cap) and (use[t] or 0) < entitled(t) then
      local r = (use[t] or 0) / s.w
      if least == nil or r < least then u, least = t, r end
    end
  end
  if u == nil then break end
  if free > 0 then
    free = free - 1
  else
    local v, most = nil, nil
    for _, t in ipairs(labels) do
      local n = use[t] or 0
      if t ~= u and n >= 1 and n - 1 >= entitled(t) and (most == nil or n / share_of(t).w > most) then
        v, most = t, n / share_of(t).w
      end
    end
    if v == nil then break end
    use[v] = use[v] - 1
    kind_use[v] = (kind_use[v] or 0) - 1
    local r = victim(v)
    stop(r[1], r[3])
  end
  use[u] = (use[u] or 0) + 1
  kind_use[u] = (kind_use[u] or 0) + 1
  want[u] = want[u] - 1
end
return {stopped, requeued}
