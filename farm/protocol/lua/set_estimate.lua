-- set a batch's EBF key (its estimated completion time) in every stage queue it uses.
local b = batch_key(batch)
local current = redis.call('HGET', b, 'state')
if current ~= 'open' then return current or 'unknown' end
redis.call('HSET', b, 'key', key)
for _, q in ipairs(split(redis.call('HGET', b, 'queues'), ',')) do
  redis.call('ZADD', queue_key(q, QPART.ebf), 'XX', key, batch)
end
emit(deadline_event)
return 'ok'
