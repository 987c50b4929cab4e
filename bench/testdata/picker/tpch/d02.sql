SELECT
  l.returnflag, l.linestatus, sum(l.quantity) AS sum_qty, avg(l.extendedprice) AS avg_price, count(*) AS count_order
FROM
  "${database}"."${schema}"."${prefix}lineitem" l
WHERE
  l.shipdate >= DATE '1995-03-01'
  AND l.shipdate <= DATE '1996-09-30'
GROUP BY l.returnflag, l.linestatus
ORDER BY l.returnflag, l.linestatus
;
