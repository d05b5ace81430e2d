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
import ssl
import subprocess
import sys
import time

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

    def __init__(self, port, path, cacert):
        context = ssl.create_default_context(cafile=cacert)
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        self.path = path

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


def equivalence(fixtures, driftgate_port, opa_port, cacert, out_md, out_json):
    """Sends every fixture to both servers and compares allowed (and the rule)."""
    drift = Client(driftgate_port, "/validate", cacert)
    opa = Client(opa_port, "/", cacert)
    rows = []
    for path in sorted(glob.glob(os.path.join(fixtures, "*.json"))):
        with open(path, "rb") as f:
            body = f.read()
        d, o = drift.review(body), opa.review(body)
        name = os.path.basename(path)
        rows.append(
            {
                "fixture": name,
                "driftgate": d,
                "opa": o,
                "allowed_agree": "error" not in d and d.get("allowed") == o.get("allowed"),
                "rule_agree": "error" not in d and d.get("rule") == o.get("rule"),
            }
        )
    agree = sum(r["allowed_agree"] for r in rows)
    rules = sum(r["rule_agree"] for r in rows)
    with open(out_json, "w") as f:
        json.dump({"fixtures": len(rows), "allowed_agree": agree, "rule_agree": rules, "rows": rows}, f, indent=1)
    lines = [
        f"Decisions on {len(rows)} fixtures (tests/fixtures/*.json, break-glass expiries shifted to now): "
        f"allowed agrees on {agree}, rule agrees on {rules}.",
        "",
        "| fixture | driftgate | OPA | agree |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows:
        show = lambda x: x.get("error") or f"{'allowed' if x['allowed'] else 'denied'} ({x['rule']})"
        verdict = "yes" if r["allowed_agree"] and r["rule_agree"] else (
            "allowed only" if r["allowed_agree"] else "**no**"
        )
        lines.append(f"| {r['fixture']} | {show(r['driftgate'])} | {show(r['opa'])} | {verdict} |")
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[0])
    for r in rows:
        if not (r["allowed_agree"] and r["rule_agree"]):
            print(f"  differs: {r['fixture']}: driftgate {r['driftgate']} OPA {r['opa']}")
    return 0 if agree == len(rows) else 1


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
    """CPU ticks spent busy on the whole machine (every core, every process) since boot, and
    the time of reading them, as TICKS:SECONDS."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    print(f"{user + nice + system + irq + softirq + steal}:{time.monotonic():.3f}")


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


def record(runs_file, run_json, oha_json, ticks_before, ticks_after, hwm_kb, busy_before, busy_after, oha_cpu_s):
    """Appends one run (oha's JSON summary, the server's CPU and peak RSS, and how much CPU
    anything else on the machine took meanwhile) to runs.jsonl."""
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
    (busy_before, wall_before), (busy_after, wall_after) = (
        map(float, busy_before.split(":")),
        map(float, busy_after.split(":")),
    )
    busy_s, wall_s = (busy_after - busy_before) / hz, wall_after - wall_before
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
        }
    )
    with open(runs_file, "a") as f:
        f.write(json.dumps(run) + "\n")
    print(
        f"  {run['target']:9} {run['body']:7} {run['proto']:6} {run['mode']:10} "
        f"{run['rps']:9.0f} rev/s  p50 {run['p50_ms']:.2f}  p99 {run['p99_ms']:.2f}  "
        f"p99.9 {run['p999_ms']:.2f} ms  ok {ok}  failed {failures(run)}  "
        f"cpu {run['cpu_ms_per_1000'] or 0:.0f} ms/1000  "
        f"rss {run['peak_rss_mb']:.1f} MB  others {run['others_cores']:.2f} cores"
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


def report(runs_file, out_md, out_json):
    """The tables for BENCHMARKS.md: one row per target, body, protocol and load."""
    with open(runs_file) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    with open(out_json, "w") as f:
        json.dump(runs, f, indent=1)
    lines = [
        "`others` is the CPU, in cores, that processes other than the server and oha used during the",
        "run (machine busy time from /proc/stat minus both): above ~0.05 the run competed with other",
        "work. `failed` counts non-200 answers and transport errors (not the HTTP/2 requests oha",
        "cancels when a run's time is up).",
        "",
    ]
    sat = [r for r in runs if r["mode"] == "saturated"]
    fixed = [r for r in runs if r["mode"] == "fixed"]
    lines += [
        "### Saturated throughput",
        "",
        "| target | review | protocol | placement | reviews/s | p50 ms | p99 ms | p99.9 ms | server CPU ms / 1,000 reviews | peak RSS MB | failed | others |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in sat:
        lines.append(
            f"| {r['target']} | {r['body']} | {r['proto']} | {r['placement']} | {fmt(r['rps'], 0)} | {fmt(r['p50_ms'])} | "
            f"{fmt(r['p99_ms'])} | {fmt(r['p999_ms'])} | {fmt(r['cpu_ms_per_1000'], 0)} | {fmt(r['peak_rss_mb'], 1)} | "
            f"{failures(r)} | {fmt(r['others_cores'])} |"
        )
    lines += [
        "",
        f"### Fixed rate ({fixed[0]['rate'] if fixed else '-'} reviews/s, latency corrected for coordinated omission)",
        "",
        "| target | review | protocol | achieved reviews/s | p50 ms | p99 ms | p99.9 ms | max ms | server CPU ms / 1,000 reviews | peak RSS MB | failed | others |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in fixed:
        lines.append(
            f"| {r['target']} | {r['body']} | {r['proto']} | {fmt(r['rps'], 0)} | {fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} | "
            f"{fmt(r['p999_ms'])} | {fmt(r['max_ms'])} | {fmt(r['cpu_ms_per_1000'], 0)} | {fmt(r['peak_rss_mb'], 1)} | "
            f"{failures(r)} | {fmt(r['others_cores'])} |"
        )
    # Ratios driftgate / OPA, for each run that both have.
    key = lambda r: (r["body"], r["proto"], r["mode"], r["placement"])
    opa = {key(r): r for r in runs if r["target"] == "opa"}
    lines += [
        "",
        "### driftgate / OPA",
        "",
        "Throughput above 1 and p99, CPU and RSS below 1 favour driftgate.",
        "",
        "| review | protocol | load | placement | throughput | p99 | CPU per review | peak RSS |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    ratio = lambda a, b: "-" if not a or not b else f"{a / b:.2f}"
    for r in runs:
        if r["target"] != "driftgate" or key(r) not in opa:
            continue
        o = opa[key(r)]
        load = "saturated" if r["mode"] == "saturated" else f"{r['rate']}/s"
        lines.append(
            f"| {r['body']} | {r['proto']} | {load} | {r['placement']} | {ratio(r['rps'], o['rps'])} | "
            f"{ratio(r['p99_ms'], o['p99_ms'])} | {ratio(r['cpu_ms_per_1000'], o['cpu_ms_per_1000'])} | "
            f"{ratio(r['peak_rss_mb'], o['peak_rss_mb'])} |"
        )
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "shift-fixtures":
        shift_fixtures(*args)
    elif command == "equivalence":
        return equivalence(args[0], int(args[1]), int(args[2]), *args[3:])
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
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
