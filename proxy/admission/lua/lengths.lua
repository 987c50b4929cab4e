-- lengths(): {queued, admitted}.
return {num(redis.call('GET', P .. 'nq')), redis.call('ZCARD', P .. 'slots')}
