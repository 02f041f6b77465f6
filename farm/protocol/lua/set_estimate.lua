-- set a batch's EBF key (its estimated completion time): A(1) batch, A(2) key, A(3) batch_deadline event
local b = P .. ':b:' .. A(1)
local state = redis.call('HGET', b, 'state')
if state ~= 'open' then return state or 'unknown' end
redis.call('HSET', b, 'key', A(2))
for _, q in ipairs(split(redis.call('HGET', b, 'queues'), ',')) do
  redis.call('ZADD', qkey(q, 'ebf'), 'XX', A(2), A(1))
end
emit(A(3))
return 'ok'
