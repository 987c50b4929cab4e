SELECT
  sum(l.extendedprice*l.discount) AS revenue
FROM
  "${database}"."${schema}"."${prefix}lineitem" l
WHERE
  l.shipdate >= DATE '1994-01-01'
  AND l.shipdate < DATE '1995-01-01'
;
