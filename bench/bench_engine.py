"""Engine pass: 10,000 facts against 300 rules on both backends, against a reference measured in the same run.

The rules are generated in the shapes the packs use (one pattern with an equality or a range test against a
parameter; two patterns joined on an attribute behind constant tests; a derived fact chained into a second
rule), and must pass `rules lint`'s engine limits, as a pack must. The reference is the cost of building the same
facts (the validated fact objects the collectors would hand over), so the ratio says how much the engine adds.

    python bench/bench_engine.py [--facts 10000] [--rules 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from mldebug_rules.engine import backend_durable
from mldebug_rules.engine.compile import alpha_fanout, compile_kb
from mldebug_rules.engine.facts import FactRegistry
from mldebug_rules.engine.lint import MAX_FANOUT
from mldebug_rules.engine.packs import KnowledgeBase, Rule, load_taxonomy
from mldebug_rules.engine.run import run_rules

# Range tests compare with pack parameters, behind a constant test (a signature, a code), so a ruleset holds a
# handful of distinct thresholds per node, not one per rule: durable-rules cannot hold more than 64 distinct range tests under one alpha node (error
# 303), and `rules lint` refuses a ruleset that comes near that (see engine/lint.py).
THRESHOLDS = [800, 1300, 3100, 4300, 4800, 6300, 7900, 9400]
HYPS = ["gpu_oom", "host_oom_kill", "gpu_hardware_fault", "disk_full", "distributed_peer_failure"]


def make_rules(n: int, rng: random.Random) -> list[dict]:
    out: list[dict] = []
    for i in range(n):
        shape = i % 3
        then = {"hypothesis": HYPS[i % len(HYPS)], "weight": 0.5, "alternatives": ["gpu_oom"], "smoke": "s"}
        if shape == 0 and i % 2:
            match = {"code": rng.randrange(200), "pid": {"gte": rng.choice(THRESHOLDS)}}
            when = {"x": {"kind": "kernel.xid", "match": match}}
        elif shape == 0:
            when = {"x": {"kind": "kernel.xid", "match": {"code": rng.randrange(200)}}}
        elif shape == 1:
            # A join, behind a constant test as pack rules write them (a signature, an Xid code).
            when = {
                "s": {"kind": "log.signature", "match": {"signature": f"sig{rng.randrange(100)}"}},
                "x": {"kind": "kernel.xid", "match": {"code": rng.randrange(200), "rank": "$s.rank"}},
            }
        else:
            name = f"d{i}"
            out.append(
                {
                    "title": "derive",
                    "when": {"x": {"kind": "kernel.xid", "match": {"code": rng.randrange(200)}}},
                    "then": {"derive": [{"kind": "derived", "attrs": {"name": name, "number": "$x.code"}}]},
                }
            )
            when = {"d": {"kind": "derived", "match": {"name": name}}}
        out.append({"title": f"r{i}", "when": when, "then": then})
    return out[:n]


def make_facts(reg: FactRegistry, n: int, rng: random.Random) -> list:
    facts = []
    for i in range(n):
        if i % 2:
            facts.append(
                reg.make(
                    "kernel.xid",
                    {"code": rng.randrange(200), "pid": rng.randrange(100_000)},
                    file="dmesg.txt",
                    line=i + 1,
                    rank=rng.randrange(1024),
                )
            )
        else:
            facts.append(
                reg.make(
                    "log.signature",
                    {"signature": f"sig{rng.randrange(1000)}"},
                    file="train.log",
                    line=i + 1,
                    rank=rng.randrange(1024),
                )
            )
    return facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facts", type=int, default=10_000)
    ap.add_argument("--rules", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    rng = random.Random(7)
    reg = FactRegistry.load()
    kb = KnowledgeBase(registry=reg, taxonomy=load_taxonomy())
    for i, spec in enumerate(make_rules(a.rules, rng)):
        kb.rules.append(Rule(id=f"bench.r{i}", pack="bench", spec=spec, where=f"gen:{i}", path="gen", line=i))
    compiled = compile_kb(kb)
    crowded = max(alpha_fanout(compiled).values())
    if crowded > MAX_FANOUT:
        raise SystemExit(f"generated ruleset fails lint: {crowded} list tests under one alpha node")
    ref = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        facts = make_facts(reg, a.facts, random.Random(11))
        ref.append(time.perf_counter() - t0)
    r = statistics.median(ref)
    print(f"reference (building {a.facts} validated facts): median {r * 1000:.0f} ms")
    ok, why = backend_durable.available()
    for backend in ["python"] + (["durable"] if ok else []):
        times, firings = [], 0
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            res = run_rules(compiled, reg, facts, backend)
            times.append(time.perf_counter() - t0)
            firings = len(res.firings)
        m = statistics.median(times)
        verdict = "OK" if m < 1.0 else "OVER 1 s"
        print(
            f"{backend:8} {a.facts} facts x {a.rules} rules: median {m * 1000:.0f} ms ({m / r:.1f}x reference), "
            f"{firings} firings [{verdict}]"
        )
    if not ok:
        print(f"durable backend not measured: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
