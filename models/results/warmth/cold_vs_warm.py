"""Cold against warm runs in the committed records (collector's warmth flag):
per Trino JVM and shape (SQL up to its literals, schema, session), the first
run's CPU (cold) against the median of the later runs (warm, other
literals), by the warm runs' size. Run from the repository root:
    python3 models/results/warmth/cold_vs_warm.py > models/results/warmth/cold_vs_warm.txt
"""
import gzip, json, collections, math, statistics as S
files = ['data/records/%s.jsonl.gz' % f for f in ['v2-iceberg-tiny-seed1','v2-iceberg-sf0.1-seed1','v2-iceberg-sf1-seed1','v2-iceberg-sf10-tpch-seed1','v2-iceberg-sf10-tpcds-seed1','noise-v2-iceberg-sf1-seed1','presto-tiny-seed1']]
for f in files:
    by = collections.defaultdict(lambda: {'cold': [], 'warm': []})
    n = collections.Counter()
    for line in gzip.open(f, 'rt'):
        r = json.loads(line)
        w = r.get('warmth'); st = r.get('stats') or {}
        cpu = st.get('cpu_ms') or st.get('cpu_millis') or 0
        if r.get('status') != 'FINISHED' or not w or cpu <= 0: continue
        k = (w['node'], w['started_at'], w['shape'])
        by[k]['warm' if w['warm'] else 'cold'].append(cpu/1000)
        n['warm' if w['warm'] else 'cold'] += 1
    d = collections.defaultdict(list)
    for k, v in by.items():
        if v['cold'] and v['warm']:
            wm = S.median(v['warm'])
            b = '<0.1s' if wm < 0.1 else '<1s' if wm < 1 else '<10s' if wm < 10 else '>=10s'
            d[b].append((math.log(v['cold'][0]) - S.median(math.log(x) for x in v['warm']), v['cold'][0]-wm))
    shapes_cold_only = sum(1 for v in by.values() if v['cold'] and not v['warm'])
    print(f.split('/')[-1], dict(n), 'shapes', len(by), 'cold-only shapes', shapes_cold_only)
    for b in ['<0.1s','<1s','<10s','>=10s']:
        if d[b]:
            r = [math.exp(a) for a,_ in d[b]]; ad = [x for _,x in d[b]]
            print('   warm median %-6s shapes %4d  cold/warm ratio median %.2f  (p25 %.2f p75 %.2f)  cold-warm seconds median %+.3f' % (b, len(r), S.median(r), S.quantiles(r,n=4)[0] if len(r)>1 else r[0], S.quantiles(r,n=4)[2] if len(r)>1 else r[0], S.median(ad)))
