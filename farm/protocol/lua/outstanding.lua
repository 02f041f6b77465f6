-- the requests arrived and not finished over the tenant's open batches (the gateway's limit,
-- farm.app.gateway.limits; `outstanding` in common.lua, which the submit scripts check as requests arrive).
return outstanding(tenant)
