#!/usr/bin/env python3
"""tail-bets.py DIR [POLICY]: the p99 tail of each seed with the affinity decision's detail, and
the waits by queue positions found.

DIR is a run's requests/<scenario> folder from a build with tail-guard.diff applied and
SY_DEBUG=1, whose x-switchyard-affinity header carries why the request went where it did: m-free /
m-wait (the holder of a known prefix, with a free slot / worth its queue), w-free / w-wait (the
key's order, free / worth its queue: worth in characters, free slots, history characters,
speculative), overloaded, none. POLICY defaults to switchyard. Queue positions found are exact
(every router's requests are in the dump); a wait is TTFT minus the simulator's prefill of the
whole prompt (0.05 ms a token), as in ../routing-2026-12u-explorations/tail-waits.py.
"""
import collections, glob, json, os, statistics, sys

SLOTS, PREFILL_MS_PER_TOKEN = 6, 0.05
BALANCED = ("overloaded", "w-free", "none")


def annotated_runs(folder, policy):
    """Each seed's successful requests, with the positions they found, their wait and decision."""
    for path in sorted(glob.glob(os.path.join(folder, f"{policy}-seed*.json"))):
        requests = [r for r in json.load(open(path)) if r.get("ok")]
        by_server = collections.defaultdict(list)
        for r in requests:
            by_server[r["backend"]].append(r)
        for r in requests:
            t = r["sentAtMs"]
            busy = sum(1 for o in by_server[r["backend"]] if o is not r and o["sentAtMs"] <= t < o["endedAtMs"])
            r["pos"] = max(0, busy - SLOTS + 1)
            r["wait"] = r["ttftMs"] - PREFILL_MS_PER_TOKEN * r.get("inputTokens", 0)
            detail = r.get("affinity", "")
            r["kind"] = detail.split("|")[1].split(":")[0] if "|" in detail else detail
        yield os.path.basename(path), requests


def main(folder, policy):
    kinds, queued, tail = collections.Counter(), collections.Counter(), []
    waits = collections.defaultdict(list)
    for name, requests in annotated_runs(folder, policy):
        ranked = sorted(requests, key=lambda r: r["ttftMs"])
        at_p99 = int(len(ranked) * 0.99) - 1
        print(name, "p99", round(ranked[at_p99]["ttftMs"]))
        tail += ranked[at_p99:]
        for r in requests:
            kinds[r["kind"]] += 1
            if r["pos"] > 0:
                queued[r["kind"]] += 1
                group = "bet" if r["kind"] == "w-wait" else "balanced" if r["kind"] in BALANCED else None
                if group is not None:
                    waits[(group, min(r["pos"], 4))].append(r["wait"])
    print("decisions:", dict(kinds))
    print("found a queue:", dict(queued))
    print("waits by queue positions found (4: four or more)")
    for (group, pos), w in sorted(waits.items()):
        w.sort()
        mean = statistics.mean(w)
        print(f"  {group:8s} {pos}: n={len(w)}, mean {mean:.0f} ms ({mean / pos:.0f} a position), median {statistics.median(w):.0f}, p90 {w[int(len(w) * 0.9)]:.0f}")
    print("the tail (each seed's p99 and above)")
    for r in sorted(tail, key=lambda r: -r["ttftMs"]):
        print(f"  {r.get('inputTokens', 0):>7} tokens  TTFT {r['ttftMs']:6.0f}  wait {r['wait']:6.0f}  positions {r['pos']}  turn {r.get('turn', '-')}  {r['backend']}  {r.get('affinity', '')}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "switchyard")
