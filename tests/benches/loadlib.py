#!/usr/bin/env python3
"""Helpers for tests/benches/load.sh: fixture shifting, the decision comparison with OPA, free
ports, process counters, and the tables written to tests/benches/results/.

Standard library only, so the script needs nothing beyond python3, oha and OPA.
"""

import datetime as dt
import glob
import http.client
import json
import os
import re
import resource
import socket
import statistics
import ssl
import subprocess
import sys
import time
import urllib.parse

# The fixtures' break-glass windows are written for this moment (the policy suites replay them
# with `now: 2026-11-30T09:00:00Z`). OPA can only use the real clock, so the comparison shifts
# every expiry by (now - FIXTURE_NOW) and both servers decide with their real clocks.
FIXTURE_NOW = dt.datetime(2026, 11, 30, 9, 0, 0, tzinfo=dt.timezone.utc)
LABEL = "driftgate.dev/break-glass"
EXPIRY = re.compile(r"^(\d{8})T(\d{4})(\d{2})?Z$")


def shift_expiry(value, delta):
    match = EXPIRY.match(value)
    if not match:
        return value  # malformed on purpose ("tomorrow"): both must refuse it as it is
    date, hm, seconds = match.groups()
    at = dt.datetime.strptime(date + hm + (seconds or "00"), "%Y%m%d%H%M%S").replace(
        tzinfo=dt.timezone.utc
    )
    return (at + delta).strftime("%Y%m%dT%H%M%SZ")


def shift_fixtures(src, dst):
    """Copies every AdmissionReview fixture with its break-glass expiries moved to now."""
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    delta = now - FIXTURE_NOW
    os.makedirs(dst, exist_ok=True)
    names = []
    for path in sorted(glob.glob(os.path.join(src, "*.json"))):
        with open(path) as f:
            review = json.load(f)
        request = review.get("request") or {}
        for side in ("object", "oldObject"):
            labels = ((request.get(side) or {}).get("metadata") or {}).get("labels") or {}
            if LABEL in labels:
                labels[LABEL] = shift_expiry(labels[LABEL], delta)
        name = os.path.basename(path)
        with open(os.path.join(dst, name), "w") as f:
            json.dump(review, f)
        names.append(name)
    print(f"shifted {len(names)} fixtures by {delta} (fixture time {FIXTURE_NOW:%Y-%m-%dT%H:%M:%SZ}, now {now:%Y-%m-%dT%H:%M:%SZ})")


class Client:
    """One kept-alive HTTPS connection, as the API server holds to a webhook."""

    def __init__(self, url, cacert):
        parsed = urllib.parse.urlsplit(url)
        context = ssl.create_default_context(cafile=cacert)
        # Loopback only: whatever host the URL names, connect to 127.0.0.1.
        self.conn = http.client.HTTPSConnection("127.0.0.1", parsed.port, context=context, timeout=10)
        self.path = parsed.path or "/"

    def review(self, body):
        self.conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            return {"error": f"HTTP {response.status}: {data[:200]!r}"}
        answer = json.loads(data).get("response") or {}
        annotations = answer.get("auditAnnotations") or {}
        return {
            "allowed": answer.get("allowed"),
            "rule": annotations.get("rule", ""),
            "decision": annotations.get("decision", ""),
        }


def outcome(answer):
    """How a decision reads in equivalence.md and in opa/differences.json."""
    return answer.get("error") or f"{'allowed' if answer['allowed'] else 'denied'} ({answer['rule']})"


def equivalence(fixtures, cacert, differences_file, out_md, out_json, *servers):
    """Sends every fixture to every server (NAME=URL; the first is the reference, `opa` the
    peer) and compares allowed and the rule. The driftgate binaries must all agree; OPA must
    agree with them or differ exactly as opa/differences.json lists, with its reason. Returns 1
    when some difference is not listed."""
    clients = {}
    for spec in servers:
        name, url = spec.split("=", 1)
        clients[name] = Client(url, cacert)
    names = list(clients)
    reference = names[0]
    with open(differences_file) as f:
        listed = {d["fixture"]: d for d in json.load(f)["differences"]}
    rows, unlisted, stale = [], 0, []
    for path in sorted(glob.glob(os.path.join(fixtures, "*.json"))):
        with open(path, "rb") as f:
            body = f.read()
        fixture = os.path.basename(path)
        answers = {name: clients[name].review(body) for name in names}
        seen = {name: outcome(answers[name]) for name in names}
        binaries_agree = all(seen[n] == seen[reference] for n in names if n != "opa")
        binaries_agree = binaries_agree and "error" not in answers[reference]
        known = listed.get(fixture)
        if "opa" not in seen or seen["opa"] == seen[reference]:
            verdict = "yes" if binaries_agree else "**no**"
            if known and "opa" in seen:
                stale.append(fixture)
        elif known and known["driftgate"] == seen[reference] and known["opa"] == seen["opa"]:
            verdict = "listed" if binaries_agree else "**no**"
        else:
            verdict = "**no**"
        unlisted += verdict == "**no**"
        rows.append({"fixture": fixture, "answers": answers, "agree": verdict})
    agree = sum(r["agree"] == "yes" for r in rows)
    by_design = sum(r["agree"] == "listed" for r in rows)
    with open(out_json, "w") as f:
        json.dump({"fixtures": len(rows), "agree": agree, "listed": by_design, "unlisted": unlisted,
                   "servers": names, "rows": rows}, f, indent=1)
    lines = [
        f"Decisions on {len(rows)} fixtures (tests/fixtures/*.json, break-glass expiries shifted to now), "
        f"servers {', '.join(names)}: every server agrees (allowed and rule) on {agree}, "
        f"{by_design} differ as listed below (by design), {unlisted} differ otherwise.",
        "",
        "| fixture | " + " | ".join(names) + " | agree |",
        "| --- | " + " | ".join("---" for _ in names) + " | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['fixture']} | " + " | ".join(outcome(r["answers"][n]) for n in names) + f" | {r['agree']} |")
    if "opa" in names:
        lines += [
            "",
            "Listed differences (tests/benches/opa/differences.json): what the Rego peer leaves out, and why.",
            "",
            "| fixture | driftgate | OPA | why |",
            "| --- | --- | --- | --- |",
        ]
        lines += [f"| {d['fixture']} | {d['driftgate']} | {d['opa']} | {d['reason']} |" for d in listed.values()]
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[0])
    for r in rows:
        if r["agree"] == "**no**":
            print(f"  differs: {r['fixture']}: " + ", ".join(f"{n} {outcome(r['answers'][n])}" for n in names))
    for fixture in stale:
        print(f"  listed in {differences_file} but decided alike now: {fixture} (remove it from the list)")
    return 1 if unlisted else 0


def free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    print(" ".join(map(str, ports)))


def cpu_ticks(pid):
    """utime + stime of a process, all threads, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3); utime and stime are fields 14 and 15.
    print(int(fields[11]) + int(fields[12]))


def busy_ticks():
    """CPU ticks spent busy on the whole machine (every core, every process) since boot, the
    ticks the hypervisor gave this machine's cores to others (steal), and the time of reading
    them, as BUSY:STEAL:SECONDS."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    print(f"{user + nice + system + irq + softirq}:{steal}:{time.monotonic():.3f}")


def timed(out, cmd):
    """Runs the load generator with its stdout in `out`; prints the CPU seconds it used."""
    with open(out, "wb") as f:
        code = subprocess.run(cmd, stdout=f).returncode
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{usage.ru_utime + usage.ru_stime:.3f}")
    return code


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                print(int(line.split()[1]))
                return
    print(0)


def steady(db_file, from_s, target_ms):
    """Percentiles of the requests a fixed-rate run scheduled from `from_s` seconds on, out of
    oha's per-request sqlite file (times in seconds from the run's start; with latency
    correction a request's latency counts from when it was due, not from when it was sent).

    Why: a run is a fresh oha process. Its first requests wait for its 32 new TLS connections
    (~65 ms here), and oha then sends the ~100 requests that fell due meanwhile at one instant;
    latency-corrected, that start alone is ~0.8 % of a 20,000-request run, most of what a p99
    allows. kube-apiserver keeps its connections to a webhook alive, so a steady 2,000/s never
    starts like that. The whole-run figures are kept beside these."""
    import sqlite3

    db = sqlite3.connect(db_file)
    try:
        rows = db.execute(
            "SELECT coalesce(start_latency_correction, start), end - coalesce(start_latency_correction, start) FROM oha"
        ).fetchall()
    finally:
        db.close()
    latencies = sorted(latency for start, latency in rows if start >= float(from_s))
    if not latencies:
        return {}
    at = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
    early = [latency for start, latency in rows if start < float(from_s)]
    return {
        "steady_from_s": float(from_s),
        "steady_requests": len(latencies),
        "steady_p50_ms": at(0.50),
        "steady_p99_ms": at(0.99),
        "steady_p999_ms": at(0.999),
        "steady_max_ms": latencies[-1] * 1000,
        # How many of the left-out first requests took longer than the p99 target: what the
        # steady figures do not show.
        "start_requests": len(early),
        "start_over_target": sum(latency * 1000 > float(target_ms) for latency in early),
    }


def record(runs_file, run_json, oha_json, ticks_before, ticks_after, hwm_kb, busy_before, busy_after, oha_cpu_s,
           requests_db="", steady_from_s="1", p99_target_ms="2"):
    """Appends one run (oha's JSON summary, the server's CPU and peak RSS, how much CPU anything
    else on the machine took meanwhile, and for a fixed-rate run its steady-state percentiles)
    to runs.jsonl."""
    with open(run_json) as f:
        run = json.load(f)
    with open(oha_json) as f:
        oha = json.load(f)
    summary = oha.get("summary", {})
    codes = oha.get("statusCodeDistribution", {})
    errors = oha.get("errorDistribution", {})
    ok = int(codes.get("200", 0))
    hz = os.sysconf("SC_CLK_TCK")
    cpu_s = (int(ticks_after) - int(ticks_before)) / hz
    (busy_before, steal_before, wall_before), (busy_after, steal_after, wall_after) = (
        map(float, busy_before.split(":")),
        map(float, busy_after.split(":")),
    )
    busy_s, wall_s = (busy_after - busy_before) / hz, wall_after - wall_before
    steal_s = (steal_after - steal_before) / hz
    pct = oha.get("latencyPercentiles", {})
    run.update(
        {
            # Answered reviews per second: oha's requestsPerSec also counts failed requests.
            "rps": ok / summary["total"] if summary.get("total") else None,
            "success_rate": summary.get("successRate"),
            "ok": ok,
            "status_codes": codes,
            "errors": errors,
            "p50_ms": (pct.get("p50") or 0) * 1000,
            "p99_ms": (pct.get("p99") or 0) * 1000,
            "p999_ms": (pct.get("p99.9") or 0) * 1000,
            "max_ms": (summary.get("slowest") or 0) * 1000,
            "server_cpu_s": cpu_s,
            "cpu_ms_per_1000": (cpu_s * 1000 / ok * 1000) if ok else None,
            "peak_rss_mb": int(hwm_kb) / 1024,
            "oha_cpu_s": float(oha_cpu_s),
            # Cores' worth of CPU that neither the server nor oha used: other work on the
            # machine competing with the benchmark.
            "others_cores": max(0.0, busy_s - cpu_s - float(oha_cpu_s)) / wall_s,
            # Cores' worth of time the hypervisor ran something else on this machine's cores:
            # every process here, the server and oha included, stood still meanwhile.
            "steal_cores": steal_s / wall_s,
        }
    )
    if requests_db:
        run.update(steady(requests_db, steady_from_s, p99_target_ms))
    with open(runs_file, "a") as f:
        f.write(json.dumps(run) + "\n")
    steady_line = (
        f"  steady p99 {run['steady_p99_ms']:.2f} ms (from {run['steady_from_s']:g} s; before it "
        f"{run['start_over_target']} of {run['start_requests']} over {float(p99_target_ms):g} ms)"
        if "steady_p99_ms" in run else ""
    )
    print(
        f"  r{run['round']} {run['target']:9} {run['body']:9} {run['proto']:2} {run['mode']:9} {run['placement']:6} "
        f"{run['rps']:9.0f} rev/s  p50 {run['p50_ms']:.2f}  p99 {run['p99_ms']:.2f}  "
        f"p99.9 {run['p999_ms']:.2f} ms  ok {ok}  failed {failures(run)}  "
        f"cpu {run['cpu_ms_per_1000'] or 0:.0f} ms/1000  "
        f"rss {run['peak_rss_mb']:.1f} MB  others {run['others_cores']:.2f} cores  "
        f"steal {run['steal_cores']:.2f} cores{steady_line}"
    )


# oha cancels HTTP/2 requests still in flight when the run's time is up; that is the load
# generator stopping, not the server failing.
DEADLINE = "aborted due to deadline"


def failures(run):
    """Non-200 answers and transport errors, without the requests oha cancelled at the deadline."""
    bad = sum(int(v) for k, v in run["status_codes"].items() if k != "200")
    return bad + sum(v for k, v in (run["errors"] or {}).items() if k != DEADLINE)


def fmt(value, digits=2):
    return "-" if value is None else f"{value:,.{digits}f}"


def spread(values, digits=2):
    """median (min–max) over the rounds; one round is just its value."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return fmt(values[0], digits)
    return f"{fmt(statistics.median(values), digits)} ({fmt(min(values), digits)}–{fmt(max(values), digits)})"


def scenario_of(run):
    return (run["body"], run["proto"], run["mode"], run["placement"])


def scenario_name(scenario):
    return "-".join(scenario)


def aggregate(runs, targets):
    """Per target and scenario, in the order measured: the runs of every round."""
    groups = {}
    for r in runs:
        groups.setdefault((r["target"], scenario_of(r)), []).append(r)
    order = {t: i for i, t in enumerate(targets + ["opa"])}
    # Scenarios in the order they ran (dicts keep insertion order).
    first_run = {s: i for i, s in enumerate(dict.fromkeys(scenario_of(r) for r in runs))}
    keys = sorted(groups, key=lambda k: (k[1][2] != "saturated", order.get(k[0], 99), first_run[k[1]]))
    return [(target, scenario, sorted(groups[(target, scenario)], key=lambda r: r["round"])) for target, scenario in keys]


def paired_ratios(runs, numerator, denominator, metric):
    """metric(numerator) / metric(denominator) for each scenario and round both ran: the two
    runs of a pair ran back to back, so a drift of the machine hits both alike."""
    by = {(r["target"], scenario_of(r), r["round"]): r for r in runs}
    ratios = {}
    for (target, scenario, round_), r in sorted(by.items(), key=lambda kv: kv[0][2]):
        if target != numerator or (denominator, scenario, round_) not in by:
            continue
        a, b = r.get(metric), by[(denominator, scenario, round_)].get(metric)
        if a and b:
            ratios.setdefault(scenario, []).append(a / b)
    return ratios


RATIO_METRICS = [("rps", "throughput"), ("p50_ms", "p50"), ("p99_ms", "p99"),
                 ("cpu_ms_per_1000", "CPU per review"), ("peak_rss_mb", "peak RSS")]


def ratio_table(runs, numerator, denominator, title, note):
    per_metric = {m: paired_ratios(runs, numerator, denominator, m) for m, _ in RATIO_METRICS}
    scenarios = [s for s in per_metric["rps"]]
    if not scenarios:
        return []
    lines = [
        "",
        f"### {title}",
        "",
        note,
        "",
        "| review | protocol | load | placement | " + " | ".join(label for _, label in RATIO_METRICS) + " | throughput per round |",
        "| --- | --- | --- | --- | " + " | ".join("---:" for _ in RATIO_METRICS) + " | --- |",
    ]
    for s in scenarios:
        body, proto, mode, placement = s
        cells = [spread(per_metric[m].get(s, [])) for m, _ in RATIO_METRICS]
        rounds = ", ".join(f"{v:.2f}" for v in per_metric["rps"][s])
        lines.append(f"| {body} | {proto} | {mode} | {placement} | " + " | ".join(cells) + f" | {rounds} |")
    return lines


def report(runs_file, out_md, out_json, p99_target_ms, *targets):
    """The tables for BENCHMARKS.md: per target and scenario the median and range over the
    rounds, the fixed rate's p99 of every round against the target, and the ratios of each
    binary to the first (the baseline) and to OPA, paired within rounds."""
    targets = list(targets)
    p99_target = float(p99_target_ms)
    with open(runs_file) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    groups = aggregate(runs, targets)
    rounds = max((r["round"] for r in runs), default=0)
    lines = [
        f"{rounds} round(s) per scenario; in each round every server ran the scenario back to back "
        "(order rotating by round). Cells are the median over the rounds and (in brackets) their "
        "range, min–max.",
        "",
        "`others` is the CPU, in cores, that processes other than the server and oha used during the",
        "run (machine busy time from /proc/stat minus both): above ~0.05 the run competed with other",
        "work. `steal` is the time, in cores, the hypervisor gave this machine's cores to other",
        "machines (/proc/stat's steal): every process here stood still meanwhile, the server and oha",
        "included, so a pause shows as latency no server can avoid. `failed` counts non-200 answers",
        "and transport errors over all rounds (not the HTTP/2 requests oha cancels when a run's time",
        "is up).",
        "",
        "### Saturated throughput",
        "",
        "| target | review | protocol | placement | reviews/s | p50 ms | p99 ms | p99.9 ms | server CPU ms / 1,000 reviews | peak RSS MB | failed | others | steal |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    # .get: runs recorded before a column existed show "-" there.
    col = lambda rs, key, digits=2: spread([r.get(key) for r in rs], digits)
    for target, (body, proto, mode, placement), rs in groups:
        if mode != "saturated":
            continue
        lines.append(
            f"| {target} | {body} | {proto} | {placement} | {col(rs, 'rps', 0)} | {col(rs, 'p50_ms')} | "
            f"{col(rs, 'p99_ms')} | {col(rs, 'p999_ms')} | {col(rs, 'cpu_ms_per_1000', 0)} | {col(rs, 'peak_rss_mb', 1)} | "
            f"{sum(failures(r) for r in rs)} | {col(rs, 'others_cores')} | {col(rs, 'steal_cores')} |"
        )
    fixed_rate = next((r["rate"] for r in runs if r["mode"] == "fixed"), None)
    if fixed_rate is not None:
        lines += [
            "",
            f"### Fixed rate ({fixed_rate} reviews/s, latency corrected for coordinated omission)",
            "",
            f"`p99 per round` lists every round's p99 in the order run; `p99 ≤ {p99_target:g} ms` counts the rounds that met it.",
            "`steady` columns count only the requests scheduled after a run's first second(s)",
            "(`steady from`): a fresh oha opens its connections and sends the requests that fell due",
            "meanwhile at once, a start kube-apiserver's kept-alive connections do not have.",
            f"`start > {p99_target:g} ms` counts, over the rounds, the left-out requests slower than {p99_target:g} ms.",
            "",
            f"| target | review | protocol | achieved reviews/s | p50 ms | p99 ms | p99 per round | p99 ≤ {p99_target:g} ms | steady from s | steady p99 ms | steady p99 per round | steady p99 ≤ {p99_target:g} ms | start > {p99_target:g} ms | p99.9 ms | steady p99.9 ms | max ms | server CPU ms / 1,000 reviews | peak RSS MB | failed | others | steal |",
            "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for target, (body, proto, mode, placement), rs in groups:
            if mode != "fixed":
                continue
            met = sum(r["p99_ms"] <= p99_target for r in rs)
            per_round = ", ".join(f"{r['p99_ms']:.2f}" for r in rs)
            # Runs recorded before the steady columns existed show "-" there.
            steady_rs = [r for r in rs if "steady_p99_ms" in r]
            steady_met = f"{sum(r['steady_p99_ms'] <= p99_target for r in steady_rs)} of {len(rs)}" if steady_rs else "-"
            steady_per_round = ", ".join(f"{r['steady_p99_ms']:.2f}" for r in steady_rs) or "-"
            start_slow = f"{sum(r['start_over_target'] for r in steady_rs)} of {sum(r['start_requests'] for r in steady_rs)}" if steady_rs else "-"
            lines.append(
                f"| {target} | {body} | {proto} | {col(rs, 'rps', 0)} | {col(rs, 'p50_ms')} | {col(rs, 'p99_ms')} | "
                f"{per_round} | {met} of {len(rs)} | {col(rs, 'steady_from_s', 0)} | {col(rs, 'steady_p99_ms')} | "
                f"{steady_per_round} | {steady_met} | {start_slow} | {col(rs, 'p999_ms')} | {col(rs, 'steady_p999_ms')} | {col(rs, 'max_ms')} | "
                f"{col(rs, 'cpu_ms_per_1000', 0)} | {col(rs, 'peak_rss_mb', 1)} | {sum(failures(r) for r in rs)} | "
                f"{col(rs, 'others_cores')} | {col(rs, 'steal_cores')} |"
            )
    ratios = {}
    baseline = targets[0] if targets else None
    for other in targets[1:]:
        lines += ratio_table(
            runs, other, baseline, f"{other} / {baseline}, paired within rounds",
            f"Each round's ratio of {other}'s figure to {baseline}'s from the same round, then their "
            "median (min–max). Throughput above 1 and p50, p99, CPU and RSS below 1 favour "
            f"{other}.",
        )
        ratios[f"{other}/{baseline}"] = {m: {scenario_name(s): v for s, v in paired_ratios(runs, other, baseline, m).items()} for m, _ in RATIO_METRICS}
    for target in targets:
        lines += ratio_table(
            runs, target, "opa", f"{target} / OPA, paired within rounds",
            f"Throughput above 1 and p50, p99, CPU and RSS below 1 favour {target}.",
        )
        ratios[f"{target}/opa"] = {m: {scenario_name(s): v for s, v in paired_ratios(runs, target, "opa", m).items()} for m, _ in RATIO_METRICS}
    with open(out_json, "w") as f:
        json.dump({"targets": targets, "rounds": rounds, "p99_target_ms": p99_target, "runs": runs,
                   "ratios_per_round": ratios}, f, indent=1)
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")


# A run counts as quiet when the hypervisor took less than this from the machine over it
# (/proc/stat's steal, measured apart from oha's latencies): at 0.02–0.05 cores the fixed-rate
# p99 already moved by milliseconds in the runs of 2026-12-03.
QUIET_STEAL_CORES = 0.02
STEAL_BINS = [0.0, 0.02, 0.05, 0.10, 0.20, 0.40, float("inf")]


def sets(out_md, p99_target_ms, *runs_files):
    """Pools repeated load.sh invocations (each a set of rounds, its runs.json) of the fixed-rate
    scenarios: per set and scenario, how many rounds met the p99 target over the whole run and
    over the steady state, and whether every round was quiet; then every run binned by steal.

    Why: one set of three rounds says little on a host whose neighbours come and go; many sets
    side by side show how often three quiet rounds meet the target, and how the tail follows
    the steal."""
    target = float(p99_target_ms)
    per_set, runs = [], []
    for runs_file in runs_files:
        with open(runs_file) as f:
            fixed = [r for r in json.load(f)["runs"] if r["mode"] == "fixed" and "steady_p99_ms" in r]
        groups = {}
        for r in fixed:
            groups.setdefault((r["target"], r["body"], r["proto"]), []).append(r)
        # A set is named by its directory (load.sh's LOAD_RESULTS/runs.json) or its file (a copy).
        name = os.path.basename(runs_file)
        name = os.path.basename(os.path.dirname(os.path.abspath(runs_file))) if name == "runs.json" else name.removesuffix(".json")
        per_set.append((name, groups))
        runs.extend(fixed)
    met = lambda rs, key: sum(r[key] <= target for r in rs)
    full = lambda rs, key: met(rs, key) == len(rs)
    quiet = lambda rs: all(r["steal_cores"] < QUIET_STEAL_CORES for r in rs)
    scenarios = list(dict.fromkeys(k for _, groups in per_set for k in groups))
    lines = [
        f"{len(per_set)} set(s) of rounds, {len(runs)} fixed-rate runs. A scenario's rounds in a set are quiet when every",
        f"one had steal below {QUIET_STEAL_CORES} cores. `whole` is the p99 over the whole run, `steady` over the requests",
        f"scheduled after its first second(s); each counts the sets whose every round met p99 ≤ {target:g} ms.",
        "",
        "| target | review | protocol | sets | quiet sets | quiet: whole 3 of 3 | quiet: steady 3 of 3 | any: whole 3 of 3 | any: steady 3 of 3 |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key in scenarios:
        groups = [g[key] for _, g in per_set if key in g]
        q = [rs for rs in groups if quiet(rs)]
        lines.append(f"| {' | '.join(key)} | {len(groups)} | {len(q)} | {sum(full(rs, 'p99_ms') for rs in q)} | "
                     f"{sum(full(rs, 'steady_p99_ms') for rs in q)} | {sum(full(rs, 'p99_ms') for rs in groups)} | "
                     f"{sum(full(rs, 'steady_p99_ms') for rs in groups)} |")
    lines += [
        "",
        "Every run by the steal during it:",
        "",
        "| steal, cores | runs | steady p99 ≤ target | whole p99 ≤ target | steady p99 ms | whole p99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lo, hi in zip(STEAL_BINS, STEAL_BINS[1:]):
        rs = [r for r in runs if lo <= r["steal_cores"] < hi]
        if rs:
            label = f"{lo:.2f}–{hi:.2f}" if hi != float("inf") else f"≥ {lo:.2f}"
            lines.append(f"| {label} | {len(rs)} | {met(rs, 'steady_p99_ms')} | {met(rs, 'p99_ms')} | "
                         f"{spread([r['steady_p99_ms'] for r in rs])} | {spread([r['p99_ms'] for r in rs])} |")
    lines += ["", "Per set, rounds that met the target (whole / steady), and the most steal in any round:", "",
              "| set | " + " | ".join(" ".join(k) for k in scenarios) + " |",
              "| --- | " + " | ".join("---" for _ in scenarios) + " |"]
    for name, groups in per_set:
        cells = []
        for key in scenarios:
            rs = groups.get(key)
            cells.append(f"{met(rs, 'p99_ms')} / {met(rs, 'steady_p99_ms')} of {len(rs)}, steal ≤ "
                         f"{max(r['steal_cores'] for r in rs):.2f}" if rs else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "shift-fixtures":
        shift_fixtures(*args)
    elif command == "equivalence":
        return equivalence(*args)
    elif command == "free-ports":
        free_ports(int(args[0]))
    elif command == "cpu-ticks":
        cpu_ticks(args[0])
    elif command == "busy-ticks":
        busy_ticks()
    elif command == "timed":
        return timed(args[0], args[1:])
    elif command == "status-kb":
        status_kb(args[0], args[1])
    elif command == "record":
        record(*args)
    elif command == "report":
        report(*args)
    elif command == "sets":
        sets(*args)
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
