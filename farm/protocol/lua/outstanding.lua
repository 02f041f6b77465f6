-- the requests arrived and not finished over the tenant's open batches (the gateway's limit,
-- farm.app.gateway.limits); closed ones leave the tenant's count.
local open = tenant_open_key(tenant)
local n = 0
for _, bid in ipairs(redis.call('SMEMBERS', open)) do
  local f = redis.call('HMGET', batch_key(bid), 'state', 'arrived', 'done')
  if f[1] == 'open' then
    n = n + tonumber(f[2]) - tonumber(f[3])
  elseif f[1] ~= 'cancelling' then
    redis.call('SREM', open, bid)
  end
end
return n
