-- poll(id): {state, enqueued ms, why}; refreshes a queued query's last poll.
-- It frees lapsed slots first, so a waiting query sees a crashed replica's
-- slot come back within the lease.
local now = now_ms()
if purge(now) > 0 then pump(now) end
local t = P .. 't:' .. ARGV[A + 1]
local v = redis.call('HMGET', t, 'st', 'enq', 'why')
if not v[1] then return {'', '0', ''} end
if v[1] == 'q' then redis.call('HSET', t, 'poll', now) end
return {v[1], v[2] or '0', v[3] or ''}
