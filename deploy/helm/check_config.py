#!/usr/bin/env python3
"""Checks that a config.yaml rendered by the chart uses only keys the binary knows.

    check_config.py DEFAULT_CONFIG.toml RENDERED_CONFIG.yaml
    check_config.py DEFAULT_CONFIG.toml --agent-env RENDERED.yaml   (GPUSCHED_AGENT_* of the DaemonSet)

Known keys are those of the binary's embedded defaults (server/service/src/default-config.toml,
clients/kube/src/default-config.toml), including the optional keys shown there as comments
(`# key = value` inside a section). The binaries reject unknown keys at start-up; this finds
them without building the binaries (deploy/helm/test.sh also runs --print-config when they exist).
"""
import re
import sys
import tomllib

import yaml


def known_keys(path):
    text = open(path).read()
    keys = set()

    def walk(prefix, d):
        for k, v in d.items():
            p = f"{prefix}.{k}" if prefix else k
            keys.add(p)
            if isinstance(v, dict):
                walk(p, v)

    walk("", tomllib.loads(text))
    section = ""
    for line in text.splitlines():
        m = re.match(r"^\[([\w.]+)\]", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^#\s*(\w+)\s*=", line)
        if m:
            keys.add(f"{section}.{m.group(1)}" if section else m.group(1))
    return keys


def used_keys(d, prefix=""):
    for k, v in d.items():
        p = f"{prefix}.{k}" if prefix else k
        yield p
        if isinstance(v, dict):
            yield from used_keys(v, p)


def agent_env(known, path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d and d["kind"] == "DaemonSet"]
    assert docs, "no DaemonSet"
    env = [e["name"] for d in docs for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])]
    keys = [n[len("GPUSCHED_AGENT_"):].lower().replace("__", ".") for n in env if n.startswith("GPUSCHED_AGENT_")]
    assert len(keys) >= 4, env
    unknown = [k for k in keys if k not in known]
    if unknown:
        print(f"{path}: GPUSCHED_AGENT_ variables unknown to {sys.argv[1]}: {unknown}")
        sys.exit(1)
    print(f"{path}: {len(keys)} GPUSCHED_AGENT_ variables, all known")


def main():
    known = known_keys(sys.argv[1])
    if sys.argv[2] == "--agent-env":
        agent_env(known, sys.argv[3])
        return
    rendered = yaml.safe_load(open(sys.argv[2]))
    unknown = [k for k in used_keys(rendered) if k not in known]
    if unknown:
        print(f"{sys.argv[2]}: keys unknown to {sys.argv[1]}: {unknown}")
        sys.exit(1)
    print(f"{sys.argv[2]}: {len(list(used_keys(rendered)))} keys, all known")


if __name__ == "__main__":
    main()
