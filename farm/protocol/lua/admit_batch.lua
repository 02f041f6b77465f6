-- count a batch among the tenant's open ones (the gateway's limit, farm.app.gateway.limits). Returns 'added' when
-- it is counted now, 'known' when it was already, 'full' when the tenant has `limit` open batches; closed ones
-- leave the count first.
local open = tenant_open_key(tenant)
if redis.call('SISMEMBER', open, batch) == 1 then return 'known' end
local most = tonumber(limit)
if redis.call('SCARD', open) >= most then
  for _, bid in ipairs(redis.call('SMEMBERS', open)) do
    local state = redis.call('HGET', batch_key(bid), 'state')
    if state ~= 'open' then redis.call('SREM', open, bid) end
  end
  if redis.call('SCARD', open) >= most then return 'full' end
end
redis.call('SADD', open, batch)
return 'added'
