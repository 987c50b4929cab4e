-- cancel(id, why): 1 when a queued query was removed; its state becomes
-- c (cancelled), why what its client's next poll reads.
local id, why = ARGV[A + 1], ARGV[A + 2]
local t = P .. 't:' .. id
local v = redis.call('HMGET', t, 'st', 'u')
if v[1] ~= 'q' then return 0 end
unqueue(id, v[2])
redis.call('HSET', t, 'st', 'c', 'why', why)
redis.call('HDEL', t, 'req')
redis.call('PEXPIRE', t, ABANDON)
redis.call('PUBLISH', P .. 'admitted', id)
return 1
