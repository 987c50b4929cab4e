-- cancel(id): 1 when a queued query was removed.
local id = ARGV[A + 1]
local t = P .. 't:' .. id
local v = redis.call('HMGET', t, 'st', 'u')
if v[1] ~= 'q' then return 0 end
unqueue(id, v[2])
redis.call('HSET', t, 'st', 'f', 'why', 'canceled')
redis.call('HDEL', t, 'req')
redis.call('PEXPIRE', t, ABANDON)
redis.call('PUBLISH', P .. 'admitted', id)
return 1
