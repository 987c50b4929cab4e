-- enter(id, user, group, cpu, payload, memory, class, class memory
-- budget): 1 admitted at once, 2 queued, 0 must wait but no payload was
-- given (call again with it), -1 queue full.
local id, u, g, cpu, req = ARGV[A + 1], ARGV[A + 2], ARGV[A + 3], tonumber(ARGV[A + 4]), ARGV[A + 5]
local mem, c, cm = tonumber(ARGV[A + 6]) or 0, ARGV[A + 7] or '', tonumber(ARGV[A + 8]) or 0
local now = now_ms()
if purge(now) > 0 then pump(now) end
local nq = num(redis.call('GET', P .. 'nq'))
if nq == 0 and fits(u, g, cpu, mem, c, cm) then
  start(id, u, g, cpu, mem, c, now, 'x')
  return 1
end
if req == '' then return 0 end
if nq >= L.qsize then return -1 end
local t = P .. 't:' .. id
redis.call('HSET', t, 'u', u, 'g', g, 'cpu', cpu, 'mem', mem, 'c', c, 'cm', cm, 'st', 'q', 'enq', now, 'poll', now, 'req', req)
redis.call('PEXPIRE', t, L.ttl)
if redis.call('RPUSH', P .. 'uq:' .. u, id) == 1 then redis.call('RPUSH', P .. 'users', u) end
redis.call('INCR', P .. 'nq')
return 2
