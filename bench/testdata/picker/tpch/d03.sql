SELECT
  o.orderpriority, count(*) AS order_count, sum(o.totalprice) AS total
FROM
  "${database}"."${schema}"."${prefix}orders" o
WHERE
  o.orderdate >= DATE '1993-07-01'
  AND o.orderdate < DATE '1993-10-01'
GROUP BY o.orderpriority
ORDER BY o.orderpriority
;
