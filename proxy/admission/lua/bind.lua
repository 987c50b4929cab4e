-- bind(id, upstream id): maps Trino's id to the admitted query's slot.
local id, up = ARGV[A + 1], ARGV[A + 2]
if not redis.call('ZSCORE', P .. 'slots', id) then return 0 end
redis.call('HSET', P .. 't:' .. id, 'up', up)
redis.call('SET', P .. 'up:' .. up, id, 'PX', L.ttl)
return 1
