-- cancel a batch: pending requests leave the queues; every unfinished request gets a `cancelled` result
-- now (a running one's late completion is discarded). Returns the batch's state ('abandoned' when the farm
-- ended it first) or 'unknown'.
local b = batch_key(batch)
local current = redis.call('HGET', b, 'state')
if not current then return 'unknown' end
if current ~= 'open' then return current end
end_early(batch, 'cancelled', 'batch cancelled', at)
return 'cancelled'
