-- Shared by every farm script, after the generated prelude (farm/protocol/scripts.py) that defines P (the
-- namespace), CAP (the history stream's approximate cap), LUA_TOKENS (the Celery broker is this same Redis:
-- scripts publish wake-up tokens themselves, in the same round trip), TASK_PREFIX, the request-state
-- field names and the keys (farm/protocol/keys.py: K.<name>, PART, QPART and the *_key functions, never spelled
-- here); each script's own arguments come after this file as locals named in farm.protocol.scripts.
-- Keys are built from the namespace, so the scripts assume one Redis (not a cluster).

local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function emit(json)
  redis.call('XADD', K.events, 'MAXLEN', '~', CAP, '*', 'e', json)
end

local function split(s, sep)
  local out = {}
  if s == nil or s == '' then return out end
  for part in string.gmatch(s, '([^' .. sep .. ']+)') do out[#out + 1] = part end
  return out
end

-- A Celery (protocol 2, kombu Redis transport) message for the stage's task, with no arguments: what
-- `app.send_task(farm.protocol.tokens.task_name(queue), queue=settings.queue(queue))` would publish.
local TOKEN_BODY = 'W1tdLCB7fSwgeyJjYWxsYmFja3MiOiBudWxsLCAiZXJyYmFja3MiOiBudWxsLCAiY2hhaW4iOiBudWxsLCAiY2hvcmQiOiBudWxsfV0='
local DEFAULT_LIMIT = '3600'
local function token_message(id, queue, limit)
  local q = cjson.encode(broker_key(queue))
  return '{"body":"' .. TOKEN_BODY .. '","content-encoding":"utf-8","content-type":"application/json",'
    .. '"headers":{"lang":"py","task":' .. cjson.encode(TASK_PREFIX .. queue) .. ',"id":"' .. id .. '","shadow":null,'
    .. '"eta":null,"expires":null,"group":null,"group_index":null,"retries":0,"timelimit":[' .. limit .. ',null],'
    .. '"root_id":"' .. id .. '","parent_id":null,"argsrepr":"()","kwargsrepr":"{}","origin":"farm-dispatch",'
    .. '"ignore_result":true,"replaced_task_nesting":0,"stamped_headers":null,"stamps":{}},'
    .. '"properties":{"correlation_id":"' .. id .. '","reply_to":"","delivery_mode":2,'
    .. '"delivery_info":{"exchange":"","routing_key":' .. q .. '},"priority":0,"body_encoding":"base64",'
    .. '"delivery_tag":"' .. id .. '"}}'
end

-- A wake-up token's Celery task id (unique in the namespace: K.tokens counts them).
local function token_id(n) return P .. '-token-' .. n end

local function push_token(queue, limit)
  local id = token_id(redis.call('INCR', K.tokens))
  redis.call('LPUSH', broker_key(queue), token_message(id, queue, limit))
end

-- One more pending request in `queue`: remember the stage's hard time limit (the sender's view of
-- the knobs; '' = keep the last one) and publish its wake-up token here when the broker is this Redis.
local function wake(queue, limit)
  if limit and limit ~= '' then
    redis.call('HSET', K.limits, queue, limit)
  else
    limit = redis.call('HGET', K.limits, queue) or DEFAULT_LIMIT
  end
  if LUA_TOKENS then push_token(queue, limit) end
end

-- A pending request in its batch's FIFO: "seq|enqueued_at|request" (seq orders the stage's FCFS mode).
local function pending_entry(seq, enq_at, rid) return seq .. '|' .. enq_at .. '|' .. rid end
local function entry_seq(entry) return tonumber(string.match(entry, '^(%d+)|')) end
local function parse_entry(entry) return string.match(entry, '^(%d+)|([^|]*)|(.*)$') end

-- A lease (the K.lease hash, by token): "queue|batch|worker|seq|enqueued_at|request".
local function lease_info(queue, bid, worker, seq, enq_at, rid)
  return queue .. '|' .. bid .. '|' .. worker .. '|' .. seq .. '|' .. enq_at .. '|' .. rid
end
local function parse_lease(info) return string.match(info, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$') end

-- What a busy worker holds (the stage's `busy` hash, by worker): JSON, read back by `farm status` and the planner.
local function busy_record(bid, rid, started_at, token)
  return cjson.encode({batch = bid, request = rid, started_at = started_at, token = token})
end

-- The stage a queue "<pipeline>.<stage>" serves.
local function stage_of(queue) return string.match(queue, '^[^.]*%.(.*)$') end

-- A notice (a list a busy worker pops with BLPOP, workers.stage): one waits at most, however many are left.
local function leave_notice(key)
  redis.call('LPUSH', key, '1')
  redis.call('LTRIM', key, 0, 0)
end

-- A batch began to wait at `queue` (its FIFO there was empty): while a share is reserved, a busy worker of the
-- stage decides at once whether a reserving tenant's request stops another's (preempt.lua). A request joining
-- its batch's waiting ones rides on the notice of the first.
local function begun_waiting(queue)
  if redis.call('EXISTS', K.reserving) == 1 then leave_notice(queue_key(queue, QPART.notice)) end
end

-- Tell the worker holding lease `token` to beat now: its lease was taken or its batch ended, so it kills the
-- request's programs at once rather than at its next beat. A notice its worker never pops (the request ended
-- first) expires.
local function tell(token)
  local n = notice_key(token)
  leave_notice(n)
  redis.call('EXPIRE', n, 600)
end

-- Put a request into its batch's FIFO in a stage queue (at the head when it comes back from a lapsed
-- lease) and keep both orders of the stage's batches: by EBF key and by the seq of the batch's head.
local function enqueue(queue, bid, rid, seq, enq_at, head, key, limit)
  wake(queue, limit)
  local l = queue_key(queue, QPART.pending .. bid)
  local entry = pending_entry(seq, enq_at, rid)
  if head then redis.call('LPUSH', l, entry) else redis.call('RPUSH', l, entry) end
  redis.call('ZADD', queue_key(queue, QPART.ebf), key, bid)
  if head or redis.call('LLEN', l) == 1 then
    local first = redis.call('LINDEX', l, 0)
    redis.call('ZADD', queue_key(queue, QPART.fcfs), entry_seq(first), bid)
    -- a request put back at the head is one a stop or a lapsed lease gave back: it leaves no notice
    if not head then begun_waiting(queue) end
  end
end

-- Fair shares (farm.protocol.shares). The tenant label of a farm batch id: `t<id>` under a tenant's prefix
-- (farm.protocol.ids.TENANT_PREFIX; a valid id has a ':' only there), '-' for a batch opened directly.
local function tenant_of(bid) return string.match(bid, '^(t%d+):') or '-' end

-- Every published share {w = weight, cap = {kind = most workers}, r = reserved} from K.shares
-- (FairShare.encode), by tenant, read in one call once a run; what does not decode counts as the default (weight
-- 1, no cap), so a bad entry cannot stop every pick.
local share_cache = nil
local DEFAULT_SHARE = {w = 1, cap = {}, r = false}
local function shares_published()
  if share_cache == nil then
    share_cache = {}
    local all = redis.call('HGETALL', K.shares)
    for i = 1, #all, 2 do
      local ok, s = pcall(cjson.decode, all[i + 1])
      if not ok or type(s) ~= 'table' then s = {} end
      local w = tonumber(s.w)
      if w == nil or w <= 0 or w ~= w then w = 1 end
      local cap = {}
      if type(s.cap) == 'table' then
        for kind, n in pairs(s.cap) do if tonumber(n) then cap[kind] = tonumber(n) end end
      end
      share_cache[all[i]] = {w = w, cap = cap, r = (s.r == true)}
    end
  end
  return share_cache
end
local function share_of(t) return shares_published()[t] or DEFAULT_SHARE end

-- The tenants whose share is reserved (FairShare.reserve) with an open batch that visits `queue`, other than
-- those in `skip` (a set): a worker is held for them while they are under their share.
local function reserving(queue, skip)
  local want, any = {}, false
  for t, s in pairs(shares_published()) do
    if not skip[t] and s.r then want[t] = true; any = true end
  end
  local out = {}
  if not any then return out end
  for _, bid in ipairs(redis.call('ZRANGE', K.batches, 0, -1)) do
    local t = tenant_of(bid)
    if want[t] then
      local qs = redis.call('HGET', batch_key(bid), 'queues') or ''
      if string.find(',' .. qs .. ',', ',' .. queue .. ',', 1, true) then out[#out + 1] = t; want[t] = nil end
    end
  end
  return out
end

-- Busy workers per tenant over stage queues (their `busy` hashes, `busy_record` above).
local function busy_by_tenant(queues)
  local out = {}
  for _, q in ipairs(queues) do
    for _, rec in ipairs(redis.call('HVALS', queue_key(q, QPART.busy))) do
      local t = string.match(rec, '"batch":%s*"(t%d+):') or '-'
      out[t] = (out[t] or 0) + 1
    end
  end
  return out
end

-- The stage's workers to divide between tenants, as the replay counts a pool's idle and busy ones: those busy,
-- and those on its roster that beat within `fresh_s` (roster.fresh_s; the entry of one that died unseen by its
-- backend stays until then, lapse.lua drops one seen dead), are not busy and have not begun their warm shutdown
-- (QPART.leaving: they take no more requests).
local function stage_workers(queue, fresh_s)
  local busy = queue_key(queue, QPART.busy)
  local leaving = queue_key(queue, QPART.leaving)
  local t, idle = now(), 0
  local seen = redis.call('HGETALL', queue_key(queue, QPART.seen))
  for i = 1, #seen, 2 do
    if t - (tonumber(seen[i + 1]) or 0) < fresh_s and redis.call('HEXISTS', busy, seen[i]) == 0
        and redis.call('HEXISTS', leaving, seen[i]) == 0 then
      idle = idle + 1
    end
  end
  return idle + redis.call('HLEN', busy)
end

-- A worker was released (finished, abandoned or reclaimed): a tenant at its cap may now be served. A pick that
-- found only capped tenants waiting swallowed the wake-up token of a request it left waiting (K.held counts them
-- per queue), so each release hands one back to every such queue: a release frees at most one worker of a cap,
-- and a token handed back while the tenant is still at its cap is swallowed and counted again, never lost. A
-- broker that is not this Redis gets none; the workers' idle check sends one within a lease time.
local function release_held(every)
  local held = redis.call('HGETALL', K.held)
  for i = 1, #held, 2 do
    local q, n = held[i], tonumber(held[i + 1])
    -- `every`: a batch ended, and a worker held for its tenant's reservation may serve the others now
    if every or n <= 1 then redis.call('HDEL', K.held, q) else redis.call('HINCRBY', K.held, q, -1) end
    for _ = 1, (every and n or 1) do wake(q, '') end
  end
end

local function drop_from_queue(queue, bid)
  redis.call('ZREM', queue_key(queue, QPART.ebf), bid)
  redis.call('ZREM', queue_key(queue, QPART.fcfs), bid)
  redis.call('DEL', queue_key(queue, QPART.pending .. bid))
end

-- A tenant's batches the gateway counts (the gateway's limits, farm.app.gateway.limits), each with its head's
-- state, arrived and done counts: closed ones leave the count here. One with no head yet is being opened (its
-- admission and its opening are two scripts) and stays; one still without a head a minute on never opened, or
-- expired long after it closed, and leaves.
local OPENING_S = 60
local function tenant_batches(tenant)
  local open, t = tenant_open_key(tenant), now()
  local out = {}
  local members = redis.call('ZRANGE', open, 0, -1, 'WITHSCORES')
  for i = 1, #members, 2 do
    local bid = members[i]
    local f = redis.call('HMGET', batch_key(bid), 'state', 'arrived', 'done')
    if f[1] == 'open' or f[1] == 'cancelling' or (not f[1] and t - tonumber(members[i + 1]) < OPENING_S) then
      out[#out + 1] = {bid, f}
    else
      redis.call('ZREM', open, bid)
    end
  end
  return out
end

-- The requests arrived and not finished over a tenant's open batches.
local function outstanding(tenant)
  local n = 0
  for _, b in ipairs(tenant_batches(tenant)) do
    if b[2][1] == 'open' then n = n + tonumber(b[2][2]) - tonumber(b[2][3]) end
  end
  return n
end

-- Whether `n` more queued requests fit the tenant's limit `most` on requests outstanding ('' = none), counting
-- them when they do. The count is read once per script run and kept here: nothing else runs meanwhile.
local counted = nil
local function fits(tenant, most, n)
  if most == '' then return true end
  counted = counted or outstanding(tenant)
  if counted + n > tonumber(most) then return false end
  counted = counted + n
  return true
end

local TTL_S = 86400

-- A sign of life from the trainer of an open batch (farm.protocol.silence): the batch's time in K.seen, on
-- Redis' clock, so trainers' clocks do not matter.
local function touch(bid) redis.call('ZADD', K.seen, now(), bid) end

-- A batch leaves the active set: completed (every result is in), cancelled by its trainer or abandoned by the
-- farm. `ending`: more fields for the end marker of its done stream (what a returning trainer is told).
local function close_batch(bid, state, at, ending)
  local b = batch_key(bid)
  release_held(true)
  redis.call('HSET', b, 'state', state, 'closed_at', at)
  redis.call('ZREM', K.batches, bid)
  redis.call('ZREM', K.seen, bid)
  emit('{"kind":"batch_' .. state .. '","batch":' .. cjson.encode(bid) .. ',"' .. state .. '_at":' .. at .. '}')
  redis.call('PUBLISH', K.epochs, '{"kind":"completed","state":"' .. state .. '","batch":' .. cjson.encode(bid) .. ',"at":' .. at .. '}')
  redis.call('XADD', b .. PART.done, '*', 'end', state, unpack(ending or {}))
  for _, part in pairs(PART) do redis.call('EXPIRE', b .. part, TTL_S) end
end

-- Store a request's result exactly once and tell the trainer (the batch's done stream).
local function finish(bid, rid, result_json, event_json, at, may_complete)
  local b = batch_key(bid)
  if redis.call('HSETNX', b .. PART.res, rid, result_json) == 0 then return 0 end
  redis.call('XADD', b .. PART.done, '*', 'r', result_json)
  emit(event_json)
  local done = redis.call('HINCRBY', b, 'done', 1)
  if may_complete and done >= tonumber(redis.call('HGET', b, 'size')) and redis.call('HGET', b, 'state') == 'open' then
    close_batch(bid, 'completed', at)
  end
  return 1
end

-- A result decided here rather than by stage code (cancel, lost worker, hard time limit).
local function finish_here(bid, rid, status, message, stage, at, record, may_complete)
  local b = batch_key(bid)
  local raw = redis.call('HGET', b .. PART.req, rid)
  local st = raw and cjson.decode(raw) or {}
  local records = st[STATE_RECORDS] or {}
  if record then records[#records + 1] = record end
  if #records == 0 then records = cjson.decode('[]') end
  local result = {
    request_id = rid, batch_id = bid, status = status, reward = 0, message = message,
    stage = stage or cjson.null, outcome = cjson.null, group = st[STATE_GROUP] or cjson.null,
    stages = records, finished_at = tonumber(at), details = cjson.decode('{}'),
  }
  local event = {
    kind = 'request_done', batch = bid, request = rid, status = status, reward = 0,
    outcome = cjson.null, finished_at = tonumber(at), message = message,
  }
  return finish(bid, rid, cjson.encode(result), cjson.encode(event), at, may_complete)
end

-- End an open batch before all its results are in (`state`: 'cancelled' by its trainer, 'abandoned' by the farm):
-- its pending requests leave the queues and every unfinished one gets a `cancelled` result now with `message`
-- (a running one's late completion is discarded).
local function end_early(bid, state, message, at, ending)
  local b = batch_key(bid)
  redis.call('HSET', b, 'state', 'cancelling')
  for _, q in ipairs(split(redis.call('HGET', b, 'queues'), ',')) do drop_from_queue(q, bid) end
  for _, token in ipairs(redis.call('HVALS', b .. PART.lease)) do tell(token) end  -- its running requests
  for _, rid in ipairs(redis.call('HKEYS', b .. PART.req)) do
    if redis.call('HEXISTS', b .. PART.res, rid) == 0 then
      finish_here(bid, rid, 'cancelled', message, nil, at, nil, false)
    end
  end
  close_batch(bid, state, at, ending)
end

-- Abandon up to `limit` open batches whose trainer has been silent for `after_s` seconds (0: never). Any number
-- of sweepers may run it: a batch ends once, and one that already ended only leaves the index.
local function abandon_silent(after_s, limit)
  if not after_s or after_s <= 0 then return 0 end
  local t = now()
  local found = redis.call('ZRANGEBYSCORE', K.seen, '-inf', t - after_s, 'WITHSCORES', 'LIMIT', 0, limit)
  local n = 0
  for i = 1, #found, 2 do
    local bid = found[i]
    local b = batch_key(bid)
    if redis.call('HGET', b, 'state') == 'open' then
      local silent = string.format('%.0f', t - tonumber(found[i + 1]))
      local after = string.format('%.15g', after_s)
      redis.call('HSET', b, 'silent_s', silent, 'abandon_after_s', after)
      local message = 'batch abandoned: no submit, result wait or heartbeat from its trainer for ' .. silent
        .. ' s (abandon_after_s ' .. after .. ')'
      end_early(bid, 'abandoned', message, tostring(t), {'silent_s', silent, 'abandon_after_s', after})
      n = n + 1
    else
      redis.call('ZREM', K.seen, bid)
    end
  end
  return n
end

-- Lease `tok` (its record `info`) ends before its request finished: it lapsed (reclaim) or was stopped
-- (preempt.lua). It leaves the lease index; the request runs again only where `tok` was still its lease, in a
-- batch still open, with no result yet. Returns the lease's fields, and whether the request runs again.
local function end_lease(tok, info)
  redis.call('ZREM', K.leases, tok)
  redis.call('HDEL', K.lease, tok)
  local queue, bid, worker, seq, enq_at, rid = parse_lease(info)
  local lease = {queue = queue, bid = bid, worker = worker, seq = seq, enq_at = enq_at, rid = rid}
  local b = batch_key(bid)
  if redis.call('HGET', b .. PART.lease, rid) ~= tok then return lease, false end
  redis.call('HDEL', b .. PART.lease, rid)
  return lease, redis.call('HGET', b, 'state') == 'open' and redis.call('HEXISTS', b .. PART.res, rid) == 0
end

-- The request of an ended lease back at the head of its batch's FIFO at its stage.
local function put_back(lease)
  local key = redis.call('HGET', batch_key(lease.bid), 'key')
  enqueue(lease.queue, lease.bid, lease.rid, lease.seq, lease.enq_at, true, key, nil)
end

-- Leases whose holder stopped heartbeating go back to the head of their batch's FIFO; a request
-- that has lost `max_att` workers fails alone as infra_error instead of killing workers forever.
local function reclaim(limit, max_att)
  local t = now()
  local out = {}
  local tokens = redis.call('ZRANGEBYSCORE', K.leases, '-inf', t, 'LIMIT', 0, limit)
  for _, tok in ipairs(tokens) do
    local info = redis.call('HGET', K.lease, tok)
    if not info then
      redis.call('ZREM', K.leases, tok)
    else
      local lease, again = end_lease(tok, info)
      local busy = queue_key(lease.queue, QPART.busy)
      local held = redis.call('HGET', busy, lease.worker)
      if held and string.find(held, tok, 1, true) then redis.call('HDEL', busy, lease.worker); release_held() end
      if again then
        redis.call('HINCRBY', K.counters, COUNT_LEASE_RECOVERED .. lease.queue, 1)  -- farm.protocol.counters
        local att = redis.call('HINCRBY', batch_key(lease.bid) .. PART.att, lease.rid, 1)
        if att >= max_att then
          local stage = stage_of(lease.queue)
          finish_here(lease.bid, lease.rid, 'infra_error', 'lost its worker ' .. att .. ' times at stage ' .. stage,
                      stage, tostring(t), nil, true)
        else
          put_back(lease)
          out[#out + 1] = lease.queue
        end
      end
    end
  end
  return out
end
