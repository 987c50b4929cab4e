-- upstream(id): Trino's id of an admitted query, or false.
return redis.call('HGET', P .. 't:' .. ARGV[A + 1], 'up')
