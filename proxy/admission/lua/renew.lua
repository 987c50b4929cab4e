-- renew(item...): extends the leases of the slots named by "t:"..id or
-- "u:"..upstream id; returns the items that hold no slot any more.
local now = now_ms()
if purge(now) > 0 then pump(now) end
local lost = {}
for i = A + 1, #ARGV do
  local item = ARGV[i]
  local id = string.sub(item, 3)
  if string.sub(item, 1, 2) == 'u:' then id = redis.call('GET', P .. 'up:' .. id) end
  if id and redis.call('ZSCORE', P .. 'slots', id) then
    redis.call('ZADD', P .. 'slots', 'XX', now + L.lease, id)
    local t = P .. 't:' .. id
    redis.call('PEXPIRE', t, L.ttl)
    local up = redis.call('HGET', t, 'up')
    if up then redis.call('PEXPIRE', P .. 'up:' .. up, L.ttl) end
  else
    table.insert(lost, item)
  end
end
return lost
