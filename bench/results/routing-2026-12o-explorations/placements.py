# placements.py DIR [POLICY] [SCENARIO] [TRACE]: where the logged build placed each request (the
# x-sy-reason column of --dump-requests rows, experiment.patch), and which placements made the tail.
import json, collections, glob, sys
d=sys.argv[1]; pol=sys.argv[2] if len(sys.argv)>2 else 'switchyard'
sc=sys.argv[3] if len(sys.argv)>3 else 'steady'
trace=sys.argv[4] if len(sys.argv)>4 else '../shared/traces/mooncake-synthetic.jsonl'
allr=[json.loads(l) for l in open(trace)]
stride=-(-len(allr)//1000); reqs=allr[::stride][:1000]
def kind(rs):
    rs=rs.split(':')[0]
    if rs.startswith('home-wait'): return 'waited at its full home (key order)'
    if rs=='match-wait': return 'waited at a full holder of its known prefix'
    if rs.startswith('home-free') or rs.startswith('home-bound'): return 'home with a free slot (key order)'
    if rs.startswith('match-'): return 'holder of its known prefix, free slot'
    return 'balanced'
tot=collections.Counter(); tail=collections.Counter(); waits=collections.defaultdict(list); seeds=0
for f in sorted(glob.glob(f'{d}/requests/{sc}/{pol}-seed*.json')):
    seeds+=1
    rows=json.load(open(f))
    idx=sorted(range(len(rows)), key=lambda i: -(rows[i]['ttftMs'] or 0))
    for rank,i in enumerate(idx):
        k=kind(rows[i].get('reason') or 'balanced'); tot[k]+=1
        # time beyond the request's whole prefill (no cache): its queue, less what a hit saved
        waits[k].append(rows[i]['ttftMs']-reqs[i]['input_length']*0.05)
        if 3<=rank<20: tail[k]+=1
n=sum(tot.values())
print(f'{d} {sc} {pol}: {seeds} seeds, {n} requests; the tail is ranks 4-20 of each seed (about p98-p99.7)')
print('| how it was placed | share | in the tail | TTFT beyond its whole prefill, median / p90 (ms) |')
print('| --- | ---: | ---: | ---: |')
for k,v in tot.most_common():
    ws=sorted(waits[k])
    print(f'| {k} | {100*v/n:.1f} % | {tail[k]} | {ws[len(ws)//2]:,.0f} / {ws[int(len(ws)*0.9)]:,.0f} |')
