"""`make iam-report`: what the recorded local runs used, and what they were granted but never used.

Reads the calls file the local runtime appends to (`.local-runs/iam-calls.jsonl` in a checkout, or
`$TRAINRUN_IAM_CALLS`) and prints:
1. every (principal, action, resource) a recorded call used, denied ones marked;
2. which of those were dependent actions of the operation that asked them (the Service
   Authorization Reference's "Dependent actions" column): why a role holds an action it never calls;
3. every statement of template.yaml's roles (the functions' and state machines') that no
   recorded call needed: removing it would deny none of them. Those are unused grants.
Exit status 1 when there is an unused grant or a denied call, so CI can run it after the tests.

    python -m trainrun.local.iam.report [--calls PATH] [--template PATH]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainrun.local.iam import calls
from trainrun.local.iam.access import calls_log_path
from trainrun.local.iam.calls import CallRecord
from trainrun.local.iam.policy import PolicySet, StatementRef, stack_principals
from trainrun.project_files import project_root


def stack_policies(
    template: Path, stack: str, region: str, stack_parameters: Mapping[str, str] | None = None
) -> dict[str, PolicySet]:
    """The roles of `template` as the local runtime deployed them for `stack` in `region`, with
    the account fixture's `stack_parameters` (some statements exist only when one is set)."""
    from trainrun.local.runtime import LOCAL_PARAMETERS
    from trainrun.local.template_deployer import ACCOUNT_ID

    # The API's URL only names the API's region in execute-api ARNs; the local one has none.
    parameters = {**LOCAL_PARAMETERS, **(stack_parameters or {}), "PclusterApiUrl": "http://127.0.0.1"}
    return stack_principals(template, parameters, region=region, account=ACCOUNT_ID, stack_name=stack)


def unused_grants(records: Sequence[CallRecord], template: Path) -> list[StatementRef]:
    unused: list[StatementRef] = []
    for stack, region in sorted({(r.stack, r.region) for r in records if r.stack}):
        mine = [r for r in records if (r.stack, r.region) == (stack, region)]
        for policies in stack_policies(template, stack, region).values():
            unused.extend(calls.unused_statements(policies, mine))
    return unused


def render(records: Sequence[CallRecord], unused: Sequence[StatementRef]) -> str:
    lines = [f"Calls used ({len(records)} recorded decisions):"]
    for principal, action, resource, allowed in calls.as_rows(records):
        lines.append(f"  {principal:32} {action:44} {resource}{'' if allowed else '   DENIED'}")
    lines.append("")
    dependents = calls.dependent_rows(records)
    lines.append(f"Dependent actions the calls needed ({len(dependents)}):")
    for principal, operation, action, resource, allowed in dependents:
        lines.append(f"  {principal:32} {operation:44} -> {action:44} {resource}{'' if allowed else '   DENIED'}")
    lines.append("")
    if unused:
        lines.append(f"Granted but never used ({len(unused)} statements): remove them, or exercise them in a test")
        for statement in unused:
            resource = statement.statement.get("Resource", statement.statement.get("NotResource"))
            lines.append(f"  {statement.id:60} {', '.join(statement.actions)} on {resource}")
    else:
        lines.append("Granted but never used: none")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainrun.local.iam.report", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=Path, default=calls_log_path(), help="the calls file (JSON lines)")
    parser.add_argument("--template", type=Path, default=project_root() / "template.yaml")
    args = parser.parse_args(argv)
    records = list(calls.read(args.calls))
    if not records:
        print(
            f"{args.calls}: no recorded calls; run the local runtime (the tests, trainrun local) first", file=sys.stderr
        )
        return 2
    unused = unused_grants(records, args.template)
    print(render(records, unused))
    denied = any(not r.allowed for r in records)
    return 1 if unused or denied else 0


if __name__ == "__main__":
    sys.exit(main())
