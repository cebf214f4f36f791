"""Handle an invalid annotation: the server answers INVALID_ARGUMENT with field violations
(google.rpc.BadRequest) that name the annotation and carry a machine-readable reason;
ValidateWorkload reports the same problems without raising, e.g. for an admission check.

    python examples/invalid_annotation.py --address 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import os
import sys

import gpusched
from gpusched import v1
from gpusched import workload as wl


def main(address: str) -> int:
    pod = wl.kubernetes_workload(
        name="typo",
        annotations={wl.DEVICE_SCORING_WEIGHTS: "slot=1,core=high,memory=1"},  # "high" is no integer
        containers={"main": wl.gpu_limits(1)},
    )
    node = v1.Node(
        name="node-a",
        cards=[v1.Card(id="GPU-0", slots=10, total_mem_mib=40960, total_cores=100, health=v1.CARD_HEALTH_HEALTHY)],
    )

    with gpusched.Client(address, timeout=10) as client:
        try:
            client.allocate(v1.AllocateRequest(nodes=[node], workload=pod))
        except gpusched.InvalidArgumentError as e:
            print(f"rejected: {e.code.name}")
            for v in e.field_violations:
                print(f"  {v.reason} {v.field}: {v.description}")
            # Branch on the reason, not on the field path (annotation names are configurable).
            if not e.violations_of(v1.VIOLATION_REASON_INVALID_SCORING_WEIGHTS):
                return 1
        else:
            print("expected INVALID_ARGUMENT", file=sys.stderr)
            return 1

        check = client.validate_workload(v1.ValidateWorkloadRequest(workload=pod))
        print(f"validate_workload: valid={check.valid}")
        for violation in check.violations:
            reason = gpusched.violation_reason_name(violation.reason)
            print(f"  {reason} {violation.field}: {violation.description}")
        return 0 if not check.valid else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--address", default=os.environ.get("GPUSCHED_ADDRESS", "127.0.0.1:50051"))
    sys.exit(main(p.parse_args().address))
