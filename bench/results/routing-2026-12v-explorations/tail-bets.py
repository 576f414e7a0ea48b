#!/usr/bin/env python3
"""tail-bets.py DIR POLICY: the p99 tail of each seed, with the affinity decision's detail.

DIR is a run's requests/steady folder from a build with tail-guard.diff applied and SY_DEBUG=1,
whose x-switchyard-affinity header carries why the request went where it did: m-free / m-wait
(the holder of a known prefix, with a free slot / worth its queue), w-free / w-wait (the key's
order, free / worth its queue: worth in characters, free slots, history characters,
speculative), overloaded, none. Queue positions found are exact (every router's requests are in
the dump); a wait is TTFT minus the simulator's prefill of the whole prompt (0.05 ms a token).
"""
import glob, json, os, statistics, sys, collections
SLOTS, PMS = 6, 0.05
folder, policy = sys.argv[1], sys.argv[2]
tail=[]; cats=collections.Counter(); catwait=collections.defaultdict(list)
for path in sorted(glob.glob(os.path.join(folder, f"{policy}-seed*.json"))):
    rs=[r for r in json.load(open(path)) if r.get('ok')]
    by=collections.defaultdict(list)
    for r in rs: by[r['backend']].append(r)
    for r in rs:
        t=r['sentAtMs']
        busy=sum(1 for o in by[r['backend']] if o is not r and o['sentAtMs']<=t<o['endedAtMs'])
        r['pos']=max(0,busy-SLOTS+1); r['wait']=r['ttftMs']-PMS*r.get('inputTokens',0)
        a=r.get('affinity','')
        kind=a.split('|')[1].split(':')[0] if '|' in a else a
        cats[kind]+=1
        if r['pos']>0: catwait[kind].append(r['ttftMs'])
    ranked=sorted(rs,key=lambda r:r['ttftMs'])
    p99=ranked[int(len(ranked)*0.99)-1]['ttftMs']
    print(os.path.basename(path),'p99',round(p99))
    tail+=[dict(r,seed=path) for r in ranked[int(len(ranked)*0.99)-1:]]
print(cats)
for k,v in catwait.items(): print(' queued',k,len(v))
for r in sorted(tail,key=lambda r:-r['ttftMs']):
    print(f"{r.get('inputTokens',0):>7} tok TTFT {r['ttftMs']:6.0f} wait {r['wait']:6.0f} pos {r['pos']} turn {r.get('turn','-')} {r.get('affinity','')}")
