#!/usr/bin/env python3
"""Where the steady TTFT p99 comes from, from a run's --dump-requests files.

tail-waits.py DIR POLICY...   (DIR: the run's requests/steady folder)

For each policy over its seeds: how long requests waited at their server by how many queue
positions they found there (every router's requests are in the dump, so a server's occupancy
when a request was sent is exact), and what the tenth-slowest requests (the p99 of 1,000) were.
A request's wait is its TTFT minus the simulator's prefill of its whole prompt (0.05 ms a token,
bench/routing/scenarios.ts): a cache hit makes it smaller, so a hit's wait is a lower bound.
"""
import glob, json, os, statistics, sys

SLOTS, PREFILL_MS_PER_TOKEN = 6, 0.05

def runs(folder, policy):
    for path in sorted(glob.glob(os.path.join(folder, f"{policy}-seed*.json"))):
        yield [r for r in json.load(open(path)) if r.get("ok")]

def main(folder, policies):
    for policy in policies:
        by_positions, hits, tail = {}, {}, []
        for requests in runs(folder, policy):
            by_server = {}
            for r in requests:
                by_server.setdefault(r["backend"], []).append(r)
            for r in requests:
                t = r["sentAtMs"]
                busy = sum(1 for o in by_server[r["backend"]] if o is not r and o["sentAtMs"] <= t < o["endedAtMs"])
                wait = r["ttftMs"] - PREFILL_MS_PER_TOKEN * r["inputTokens"]
                r["positions"], r["wait"] = max(0, busy - SLOTS + 1), wait
                if r.get("affinity") not in ("hit", "spill"):
                    by_positions.setdefault(min(r["positions"], 4), []).append(wait)
                if r.get("affinity") == "hit":
                    hits.setdefault(min(r["positions"], 4), []).append(-wait)
            ranked = sorted(requests, key=lambda r: r["ttftMs"])
            tail += ranked[int(len(ranked) * 0.99) - 1:]
        print(f"{policy}: waits of requests not placed by affinity, by queue positions found")
        for k in sorted(by_positions):
            w = sorted(by_positions[k])
            print(f"  {k}{'+' if k == 4 else ''} positions: n={len(w)}, median {statistics.median(w):.0f} ms, p90 {w[int(len(w) * 0.9)]:.0f} ms")
        if hits:
            print(f"  affinity hits by queue positions found: TTFT saved against the whole prompt's prefill with no wait")
            for k in sorted(hits):
                g = sorted(hits[k])
                print(f"  {k}{'+' if k == 4 else ''} positions: n={len(g)}, mean {statistics.mean(g):.0f} ms, median {statistics.median(g):.0f} ms, more than 1 s lost: {sum(1 for v in g if v < -1000)}")
        tail = [r for r in tail if r["inputTokens"] < 150_000]  # the trace's two 191k-token prompts top every router
        print(f"  the p99 tail without the two 191k prompts ({len(tail)} requests over the seeds):")
        for r in sorted(tail, key=lambda r: -r["ttftMs"]):
            print(f"    {r['inputTokens']:>6} tokens  TTFT {r['ttftMs']:>5.0f}  wait ≥ {r['wait']:>5.0f}  positions {r['positions']}  {r.get('affinity', '')}")

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
