-- submit a request. `first_queue` is '' when it visits no stage (then `result` and `done_event` finish it
-- here), `group` '' when it has none. Returns {'queued'}, {'finished'}, {'duplicate'} (the same request
-- again), {'conflict'} (same id, other payload), {'closed', state} ('sealed' for a sealed batch still
-- finishing; {'closed', 'abandoned', silent_s, abandon_after_s} for one the farm abandoned), {'full', size},
-- {'limit', most_outstanding, outstanding} (a new queued request past its tenant's limit on requests outstanding,
-- `tenant` and `most_outstanding` '' when none: checked here, as it arrives, so racing submits cannot pass it
-- together) or {'unknown'}. Any answer about an open batch is a sign of life from its trainer.
local b = batch_key(batch)
local f = redis.call('HMGET', b, 'state', 'size', 'arrived', 'key', 'sealed', 'silent_s', 'abandon_after_s')
if not f[1] then return {'unknown'} end
if f[1] == 'open' then touch(batch) end
local old = redis.call('HGET', b .. PART.payload, request)
if old then
  if old == payload then return {'duplicate'} end
  return {'conflict'}
end
if f[1] == 'abandoned' then return {'closed', f[1], f[6] or '', f[7] or ''} end
if f[1] ~= 'open' then return {'closed', f[1]} end
if f[5] then return {'closed', 'sealed'} end
if tonumber(f[3]) >= tonumber(f[2]) then return {'full', f[2]} end
if first_queue ~= '' and not fits(tenant, most_outstanding, 1) then return {'limit', most_outstanding, counted} end
redis.call('HSET', b .. PART.payload, request, payload)
redis.call('HSET', b .. PART.req, request, state)
redis.call('HINCRBY', b, 'arrived', 1)
if group ~= '' then redis.call('HINCRBY', b .. PART.groups, group, 1) end
emit(arrived_event)
if first_queue ~= '' then
  enqueue(first_queue, batch, request, redis.call('INCR', K.seq), at, false, f[4], limit)
  return {'queued'}
end
finish(batch, request, result, done_event, at, true)
return {'finished'}
