-- take(id): {state, enqueued ms, why, payload}; the payload only to the one
-- caller that finds the query admitted, which then holds its slot.
local id = ARGV[A + 1]
local now = now_ms()
if purge(now) > 0 then pump(now) end
local t = P .. 't:' .. id
local v = redis.call('HMGET', t, 'st', 'enq', 'why', 'req')
if v[1] ~= 'a' then return {v[1] or '', v[2] or '0', v[3] or ''} end
redis.call('ZADD', P .. 'slots', 'XX', now + L.lease, id)
redis.call('HSET', t, 'st', 'x')
redis.call('HDEL', t, 'req')
redis.call('PEXPIRE', t, L.ttl)
return {'a', v[2] or '0', '', v[4] or ''}
