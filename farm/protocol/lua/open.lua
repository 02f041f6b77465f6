-- open a batch: A(1) batch, A(2) task, A(3) pipeline, A(4) size, A(5) opened_at, A(6) group_size,
-- A(7) queues (comma separated), A(8) batch_opened event, A(9) epochs message
local bid, task, pipeline, size = A(1), A(2), A(3), A(4)
local b = P .. ':b:' .. bid
if redis.call('EXISTS', b) == 1 then
  local f = redis.call('HMGET', b, 'task', 'pipeline', 'size')
  if f[1] == task and f[2] == pipeline and f[3] == size then return {'exists'} end
  return {'conflict', f[1] or '', f[2] or '', f[3] or ''}
end
local used = redis.call('HGET', P .. ':tasks', task)
if used and used ~= pipeline then return {'task', used} end
redis.call('HSET', P .. ':tasks', task, pipeline)
redis.call('HSET', b, 'task', task, 'pipeline', pipeline, 'size', size, 'opened_at', A(5), 'key', A(5),
  'arrived', 0, 'done', 0, 'state', 'open', 'group_size', A(6), 'queues', A(7))
redis.call('ZADD', P .. ':batches', A(5), bid)
for _, q in ipairs(split(A(7), ',')) do redis.call('SADD', P .. ':queues', q) end
emit(A(8))
redis.call('PUBLISH', P .. ':epochs', A(9))
return {'opened'}
