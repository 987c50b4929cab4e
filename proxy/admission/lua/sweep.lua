-- sweep(why-timeout): frees expired slots, fails queued queries that waited
-- past max_wait or that nobody polled for 5 minutes, admits what fits.
local now = now_ms()
purge(now)
local failed = 0
for _, u in ipairs(redis.call('LRANGE', P .. 'users', 0, -1)) do
  for _, id in ipairs(redis.call('LRANGE', P .. 'uq:' .. u, 0, -1)) do
    local t = P .. 't:' .. id
    local v = redis.call('HMGET', t, 'st', 'enq', 'poll')
    local why = nil
    if v[1] ~= 'q' then
      why = ''
    elseif now - num(v[2]) > L.maxwait then
      why = ARGV[A + 1]
    elseif now - num(v[3]) > ABANDON then
      why = 'abandoned: no poll for 5 minutes'
    end
    if why then
      unqueue(id, u)
      if why ~= '' then
        redis.call('HSET', t, 'st', 'f', 'why', why)
        redis.call('HDEL', t, 'req')
        redis.call('PEXPIRE', t, ABANDON)
        redis.call('PUBLISH', P .. 'admitted', id)
        failed = failed + 1
      end
    end
  end
end
pump(now)
return failed
