-- the tenant's rolling batch of `protocol` numbered `index` of `epoch` ended without a sample that joined it
-- (cancelled, abandoned): if it is still the current one, the next sample opens the next. Returns 1 if it moved on.
local state = roll_key(tenant, protocol)
local f = redis.call('HMGET', state, 'epoch', 'index')
if f[1] ~= epoch or tonumber(f[2]) ~= tonumber(index) then return 0 end
redis.call('HSET', state, 'index', tonumber(index) + 1, 'count', 0)
return 1
