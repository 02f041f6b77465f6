-- a trainer's sign of life for its batches (`batches`, comma-separated): a heartbeat, or a wait on their results.
-- Each open one is seen now; a batch whose trainer stays silent for the knob abandon_after_s is abandoned by the
-- sweep. Returns per batch {state, silent_s, abandon_after_s} (the last two set once abandoned), {'unknown'}
-- for one that does not exist.
local out = {}
for _, bid in ipairs(split(batches, ',')) do
  local f = redis.call('HMGET', batch_key(bid), 'state', 'silent_s', 'abandon_after_s')
  if not f[1] then
    out[#out + 1] = {'unknown'}
  else
    if f[1] == 'open' then touch(bid) end
    out[#out + 1] = {f[1], f[2] or '', f[3] or ''}
  end
end
return out
