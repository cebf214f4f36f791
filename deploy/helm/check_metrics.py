#!/usr/bin/env python3
"""Checks that PromQL queries only use metrics and labels that gpusched-server exports.

    check_metrics.py METRICS_RS --dashboard DASHBOARD.json
    check_metrics.py METRICS_RS --rules RENDERED.yaml     (the PrometheusRule objects in it)

The exported families are read from server/service/src/metrics.rs (prometheus-client: prefix
from Registry::with_prefix, counters get _total, histograms _bucket/_sum/_count, labels from
the EncodeLabelSet structs), so a renamed metric or label fails here.
"""
import json
import re
import sys


def exported(src):
    prefix = re.search(r'Registry::with_prefix\("(\w+)"\)', src).group(1)
    structs = {m.group(1): re.findall(r"^\s+(\w+):", m.group(2), re.M)
               for m in re.finditer(r"struct (\w+) \{(.*?)\n\}", src, re.S)}
    fields = {m.group(1): (m.group(3), m.group(2))
              for m in re.finditer(r"^\s+(\w+): Family<(\w+), (Counter|Histogram)", src, re.M)}
    # Unlabelled metrics: `let x = Counter::default()`, `let x = Histogram::new(..)` or a struct
    # field `x: Gauge`.
    plain = {m.group(1): m.group(2)
             for m in re.finditer(r"(?:let |^\s+)(\w+)(?:: | = )(Counter|Gauge|Histogram)\b", src, re.M)}
    metrics = {}
    for name, var in re.findall(r'registry\.register\(\s*"(\w+)",\s*"[^"]*",\s*(\w+)\.clone\(\)', src):
        if var in fields:
            kind, labelset = fields[var]
            own = set(structs[labelset])
        else:
            kind, own = plain[var], set()
        base = f"{prefix}_{name}"
        # target labels Prometheus adds
        labels = own | {"namespace", "job", "instance", "pod", "service"}
        if kind == "Counter":
            metrics[base + "_total"] = labels
        elif kind == "Gauge":
            metrics[base] = labels
        else:
            for s in ("_bucket", "_sum", "_count"):
                metrics[base + s] = labels | ({"le"} if s == "_bucket" else set())
    assert len(metrics) >= 5, metrics
    return prefix, metrics


def dashboard_queries(path):
    dash = json.load(open(path))
    out = []

    def walk(o):
        if isinstance(o, dict):
            if o.get("type") == "datasource":
                return
            for k, v in o.items():
                if k in ("expr", "definition", "query") and isinstance(v, str):
                    out.append(v)
                else:
                    walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(dash)
    return dash, out


def rule_queries(path):
    import yaml
    out = []
    for d in yaml.safe_load_all(open(path)):
        if d and d.get("kind") == "PrometheusRule":
            for g in d["spec"]["groups"]:
                out += [r["expr"] for r in g["rules"]]
    return out


def check(prefix, metrics, exprs, optional_metric=()):
    errors, used = [], set()
    for e in exprs:
        names = set(re.findall(r"\b(%s_[a-z_]+)\b" % prefix, e))
        if not names and not any(o in e for o in optional_metric):
            errors.append(f"no {prefix} metric in: {e}")
        for n in names:
            used.add(n)
            if n not in metrics:
                errors.append(f"{n} is not exported by metrics.rs (known: {sorted(metrics)})")
        if len(names) == 1:  # labels are checked where a query uses one family
            (n,) = names
            if n not in metrics:
                continue
            labels = re.findall(r'(\w+)\s*(?:=~|!~|!=|=)\s*"', e)
            labels += [x.strip() for g in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", e) for x in g.split(",")]
            for lab in labels:
                if lab and lab not in metrics[n]:
                    errors.append(f"label {lab} is not a label of {n} ({sorted(metrics[n])}): {e}")
    return errors, used


def main():
    src = open(sys.argv[1]).read()
    prefix, metrics = exported(src)
    if sys.argv[2] == "--dashboard":
        dash, exprs = dashboard_queries(sys.argv[3])
        errors, used = check(prefix, metrics, exprs)
        assert len(exprs) >= 10, f"only {len(exprs)} queries"
        titles = " ".join(p["title"].lower() for p in dash["panels"] if p["type"] != "row")
        for want in ("rate", "error", "duration", "decision"):
            if want not in titles:
                errors.append(f"no panel about {want}")
        for fam in ("requests_total", "request_duration_seconds_bucket", "decisions_total"):
            if f"{prefix}_{fam}" not in used:
                errors.append(f"{prefix}_{fam} is not on the dashboard")
    else:
        exprs = rule_queries(sys.argv[3])
        assert exprs, "no PrometheusRule expressions"
        errors, used = check(prefix, metrics, exprs, optional_metric=("up{",))
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"{len(exprs)} queries use {sorted(used)}; all exported by metrics.rs")


if __name__ == "__main__":
    main()
