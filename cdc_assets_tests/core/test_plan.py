"""What is due for a table (core/plan.py): the sensor's and `run`'s one rule, and their one difference."""
from cdc_assets.core.apply_policy import Decision
from cdc_assets.core.plan import Ingest, Progress, due_steps


def asked(answer):
    """A lazy input that records whether the planner asked for it."""
    calls = []

    def ask():
        calls.append(1)
        return answer
    ask.calls = calls
    return ask


def test_the_sensor_takes_the_next_batch_and_run_takes_all_in_order():
    p = Progress(registered=(1, 2, 3), staged=1, applied=1, base_snapshot=False, base_imported=True)
    due, held = asked(Decision(True, "applies every batch")), asked([])
    assert due_steps(p, Ingest.NEXT, due, held).ingest == (2,)
    assert due_steps(p, Ingest.ALL, due, held).ingest == (2, 3)
    # nothing is applied while a batch waits to be staged, and the policy is not even asked
    assert not due_steps(p, Ingest.ALL, due, held).apply and not due.calls and not held.calls


def test_the_apply_follows_the_policy_once_everything_is_staged():
    p = Progress(registered=(1, 2), staged=2, applied=1, base_snapshot=False, base_imported=True)
    steps = due_steps(p, Ingest.NEXT, asked(Decision(True, "applies every batch")), asked([]))
    assert steps.apply and steps.ingest == () and steps.waiting is None
    waits = due_steps(p, Ingest.ALL, asked(Decision(False, "merge waits: 3 changes pending")), asked([]))
    assert not waits.apply and waits.waiting == "merge waits: 3 changes pending" and not waits.any


def test_a_batch_that_failed_its_accounting_holds_the_apply():
    p = Progress(registered=(1, 2), staged=2, applied=0, base_snapshot=False, base_imported=True)
    steps = due_steps(p, Ingest.ALL, asked(Decision(True, "applies every batch")), asked(["b000002"]))
    assert not steps.apply and steps.held == ("b000002",)


def test_the_base_snapshot_is_imported_first_and_applied_alone():
    fresh = Progress(registered=(), staged=-1, applied=-1, base_snapshot=True, base_imported=False)
    steps = due_steps(fresh, Ingest.NEXT, asked(Decision(True, "first build")), asked([]))
    assert steps.base_import and not steps.apply
    imported = Progress(registered=(), staged=-1, applied=-1, base_snapshot=True, base_imported=True)
    assert due_steps(imported, Ingest.NEXT, asked(Decision(True, "first build")), asked([])).apply
    done = Progress(registered=(), staged=-1, applied=0, base_snapshot=True, base_imported=True)
    assert not due_steps(done, Ingest.NEXT, asked(Decision(True, "first build")), asked([])).any
