"""The budget guard's rule (budget.max_cost_usd), for every state that waits while the run bills.

The run's estimated cost so far (trainrun.logic.cost.spent: the plan's prices over the time since
each billable resource was created) against its budget: from BUDGET_WARNING_FRACTION of it on, a
`budget_warning` run event (once a run); at the whole of it, the state that asked raises
BudgetExceeded, after stopping what it waits for (Check compile / Check train stop the job with its
grace period; Create cluster and Resume train have no job running), and the run goes to its teardown.
"""

from __future__ import annotations

from datetime import datetime

from trainrun.errors import TrainrunError
from trainrun.logic.cost import BudgetLevel, budget_level, estimate_cost, spent
from trainrun.model.run_record import RunRecord, RunStore
from trainrun.steps.run_events import RunEvents, RunState


class BudgetExceeded(TrainrunError):
    """The run's estimated cost reached budget.max_cost_usd: what ran was stopped (a job with its
    grace period: SIGTERM, then Slurm's KillWait), and the run's teardown follows."""


def budget_spent(store: RunStore, record: RunRecord, run_events: RunEvents, now: datetime) -> str | None:
    """Where the run's cost stands, for BudgetExceeded's cause, when its budget is spent; None while it
    is not (or the run has no budget). Publishes the budget's warning on the way, once a run."""
    spec = record.spec
    if spec is None or spec.budget is None:
        return None
    limit = spec.budget.max_cost_usd
    cost = spent(estimate_cost(spec), record, now)
    level = budget_level(cost, limit)
    if level == BudgetLevel.WITHIN:
        return None
    standing = f"the estimated cost so far, ${cost:,.2f}, is {cost / limit:.0%} of budget.max_cost_usd (${limit:,.2f})"
    if store.mark_budget_warned(record.run_id):
        run_events.publish(record, RunState.BUDGET_WARNING, standing)
    return standing if level == BudgetLevel.SPENT else None


def hold_budget(store: RunStore, record: RunRecord, run_events: RunEvents, now: datetime, what: str) -> None:
    """The budget, while something the run needs before its first job is being made (`what`, as
    "while <what>"): BudgetExceeded once it is spent; the teardown deletes what was made."""
    standing = budget_spent(store, record, run_events, now)
    if standing is not None:
        raise BudgetExceeded(f"{standing}, while {what}: no job ran; the teardown deletes it")
