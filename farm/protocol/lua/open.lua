-- open a batch. Returns {'opened'}, {'exists'} (the same batch again), {'conflict', task, pipeline, size}
-- or {'task', pipeline} (the task belongs to another pipeline).
local b = batch_key(batch)
if redis.call('EXISTS', b) == 1 then
  local f = redis.call('HMGET', b, 'task', 'pipeline', 'size', 'state')
  if f[1] == task and f[2] == pipeline and f[3] == size then
    if f[4] == 'open' then touch(batch) end  -- a trainer attaching again is alive
    return {'exists'}
  end
  return {'conflict', f[1] or '', f[2] or '', f[3] or ''}
end
local used = redis.call('HGET', K.tasks, task)
if used and used ~= pipeline then return {'task', used} end
redis.call('HSET', K.tasks, task, pipeline)
redis.call('HSET', b, 'task', task, 'pipeline', pipeline, 'size', size, 'opened_at', opened_at, 'key', opened_at,
  'arrived', 0, 'done', 0, 'state', 'open', 'group_size', group_size, 'queues', queues)
redis.call('ZADD', K.batches, opened_at, batch)
touch(batch)
for _, q in ipairs(split(queues, ',')) do redis.call('SADD', K.queues, q) end
emit(opened_event)
redis.call('PUBLISH', K.epochs, epoch_message)
return {'opened'}
