"""position-waits.py DIR [POLICY]: waits by queue positions found, for balanced requests and for
requests that waited at a full home (w-wait), from a SY_DEBUG run's requests/steady folder."""
import glob, json, os, statistics, sys, collections
SLOTS, PMS = 6, 0.05
folder=sys.argv[1]; pol=sys.argv[2] if len(sys.argv)>2 else 'switchyard'
d=collections.defaultdict(list)
for path in sorted(glob.glob(os.path.join(folder, f"{pol}-seed*.json"))):
    rs=[r for r in json.load(open(path)) if r.get('ok')]
    by=collections.defaultdict(list)
    for r in rs: by[r['backend']].append(r)
    for r in rs:
        t=r['sentAtMs']
        busy=sum(1 for o in by[r['backend']] if o is not r and o['sentAtMs']<=t<o['endedAtMs'])
        pos=max(0,busy-SLOTS+1)
        a=r.get('affinity','')
        kind=a.split('|')[1].split(':')[0] if '|' in a else a
        wait=r['ttftMs']-PMS*r['inputTokens']
        if pos>0 and kind in ('overloaded','w-free','none'):
            d[('bal',min(pos,4))].append(wait)
        if pos>0 and kind=='w-wait': d[('bet',min(pos,4))].append(wait)
for k in sorted(d):
    w=sorted(d[k]); print(k, len(w), 'mean',round(statistics.mean(w)),'median',round(statistics.median(w)),'p90',round(w[int(len(w)*.9)]), 'mean/pos', round(statistics.mean(w)/k[1]))
