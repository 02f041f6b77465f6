-- many submits in one run, each answered exactly as submit.lua would answer it in its turn. `submit_one` (submit.lua's
-- body, generated above) serves them one at a time. The usual bulk submit - an open batch with room for all of
-- them, every request joining a stage queue - takes the same effects with one call per key rather than one per
-- request and key: nothing can finish, fill or close the batch midway, so only duplicates need care.
local n = tonumber(count)

local function one_by_one()
  local replies = {}
  for i = 0, n - 1 do
    local from = FIRST + i * ARITY
    replies[i + 1] = submit_one(unpack(ARGV, from, from + ARITY - 1))
  end
  return replies
end

local function arg(i, k) return ARGV[FIRST + i * ARITY + k] end

if n == 0 then return {} end
if n > BULK_MAX then return one_by_one() end  -- keeps every unpack below Lua's stack limit
local bid = arg(0, A_BATCH)
local b = batch_key(bid)
local f = redis.call('HMGET', b, 'state', 'size', 'arrived', 'key', 'sealed')
if f[1] ~= 'open' or f[5] or tonumber(f[3]) + n > tonumber(f[2]) then return one_by_one() end
local rids = {}
local tenant, most = arg(0, A_TENANT), arg(0, A_MOST_OUTSTANDING)
for i = 0, n - 1 do
  if arg(i, A_BATCH) ~= bid or arg(i, A_FIRST_QUEUE) == '' or arg(i, A_TENANT) ~= tenant
      or arg(i, A_MOST_OUTSTANDING) ~= most then
    return one_by_one()
  end
  rids[i + 1] = arg(i, A_REQUEST)
end

local stored = redis.call('HMGET', b .. PART.payload, unpack(rids))
if most ~= '' then  -- the new requests must all fit the tenant's limit, else each is answered in its turn
  local fresh, seen = 0, {}
  for i = 1, n do
    if not stored[i] and not seen[rids[i]] then
      seen[rids[i]] = true
      fresh = fresh + 1
    end
  end
  if not fits(tenant, most, fresh) then return one_by_one() end
end
local replies, taken = {}, {}  -- taken: this call's new requests' payloads, for a request sent twice in it
local payloads, states, groups, queues, order = {}, {}, {}, {}, {}
local new = 0
for i = 0, n - 1 do
  local rid, payload = rids[i + 1], arg(i, A_PAYLOAD)
  local before = taken[rid] or stored[i + 1]
  if before then
    replies[i + 1] = {before == payload and 'duplicate' or 'conflict'}
  else
    taken[rid] = payload
    new = new + 1
    payloads[#payloads + 1] = rid
    payloads[#payloads + 1] = payload
    states[#states + 1] = rid
    states[#states + 1] = arg(i, A_STATE)
    local group = arg(i, A_GROUP)
    if group ~= '' then groups[group] = (groups[group] or 0) + 1 end
    emit(arg(i, A_ARRIVED_EVENT))
    local queue = arg(i, A_FIRST_QUEUE)
    local into = queues[queue]
    if not into then
      into = {}
      queues[queue] = into
      order[#order + 1] = queue
    end
    into[#into + 1] = {new, rid, arg(i, A_AT), arg(i, A_LIMIT)}  -- the seq is the new request's turn
    replies[i + 1] = {'queued'}
  end
end
touch(bid)  -- the bulk path's one sign of life (each request sent one by one gives its own)
if new == 0 then return replies end

redis.call('HSET', b .. PART.payload, unpack(payloads))
redis.call('HSET', b .. PART.req, unpack(states))
redis.call('HINCRBY', b, 'arrived', new)
for group, count_in in pairs(groups) do redis.call('HINCRBY', b .. PART.groups, group, count_in) end
local seq0 = redis.call('INCRBY', K.seq, new) - new
for _, queue in ipairs(order) do
  local into = queues[queue]
  -- each request's token carries its stage's hard limit: its own, else the last one given, else the stored one
  local last, entries, limits = nil, {}, {}
  for j, r in ipairs(into) do
    entries[j] = pending_entry(seq0 + r[1], r[3], r[2])
    if r[4] ~= '' then last = r[4] end
    limits[j] = last or false
  end
  if not limits[1] then  -- the first ones gave none: the limit stored before this call
    local before = redis.call('HGET', K.limits, queue) or DEFAULT_LIMIT
    for j = 1, #limits do limits[j] = limits[j] or before end
  end
  if last then redis.call('HSET', K.limits, queue, last) end
  if LUA_TOKENS then
    local first_id = redis.call('INCRBY', K.tokens, #into) - #into
    local tokens = {}
    for j = 1, #into do tokens[j] = token_message(token_id(first_id + j), queue, limits[j]) end
    redis.call('LPUSH', broker_key(queue), unpack(tokens))
  end
  local l = queue_key(queue, QPART.pending .. bid)
  local length = redis.call('RPUSH', l, unpack(entries))
  redis.call('ZADD', queue_key(queue, QPART.ebf), f[4], bid)
  if length == #entries then  -- the batch's FIFO was empty: its head now orders the stage's FCFS mode
    redis.call('ZADD', queue_key(queue, QPART.fcfs), seq0 + into[1][1], bid)
    begun_waiting(queue)
  end
end
return replies
