-- count a batch among the tenant's open ones (the gateway's limit, farm.app.gateway.limits). Returns 'added' when
-- it is counted now, 'known' when it was already, 'full' when the tenant has `limit` open batches; closed ones
-- leave the count first (`tenant_batches` in common.lua).
local open = tenant_open_key(tenant)
if redis.call('ZSCORE', open, batch) then return 'known' end
if redis.call('ZCARD', open) >= tonumber(limit) and #tenant_batches(tenant) >= tonumber(limit) then return 'full' end
redis.call('ZADD', open, now(), batch)
return 'added'
