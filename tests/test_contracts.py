"""rq and redis-py held to the contract quoteclip relies on: every rq ``Worker`` method jobs/ overrides, every rq
name it calls beyond the plainest public API (internals such as ``Queue._enqueue_job``, ``rq.executions``,
``rq.job_lifecycle``), the Redis layout jobs/reconcile.py's Lua scripts read, and the redis-py calls the queue
makes. No service: signatures (``inspect.signature(...).bind`` with the arguments our code passes), rq's own
source (how it calls the methods we override) and commands recorded on a pipeline that is never sent.

pyproject.toml pins rq and redis-py to the minors this file was run against. To take a new minor: install it,
run this file, and read each failure's "relied on by" for the module to look at."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import signal
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions
import rq
import rq.job_lifecycle
from redis import Redis
from rq import Queue
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.worker import BaseWorker, Worker, WorkerStatus

from jobs.webhooks import ConcurrentDeliveries
from jobs.worker import ClipWorker, RenderWorker, WebhookWorker

NOWHERE = Redis(host="127.0.0.1", port=1)  # never answers: nothing here may send a command


def _pipeline() -> Any:
    return NOWHERE.pipeline(transaction=False)


def _recorded(pipe: Any) -> list[tuple[Any, ...]]:
    """The commands queued on a pipeline that is never executed: (COMMAND, key, args…)."""
    return [tuple(args) for args, _options in pipe.command_stack]


def _job(job_id: str = "j1", origin: str = "clips") -> Job:
    return Job.create("jobs.tasks.render_job", connection=NOWHERE, id=job_id, origin=origin)


def _worker(cls: type[BaseWorker] = Worker, **options: Any) -> Any:
    """A worker built as ours are, without touching Redis (``prepare_for_work=False``: no CLIENT SETNAME)."""
    return cls(["clips", "clips:bulk"], connection=NOWHERE, prepare_for_work=False, **options)


# ---- the rq Worker methods we override ------------------------------------------------------------------------------

OURS: tuple[type, ...] = (ClipWorker, RenderWorker, WebhookWorker, ConcurrentDeliveries)

OVERRIDES: dict[str, str] = {
    "__init__": "jobs/worker.py RenderWorker (passes its work_horse_killed_handler)",
    "bootstrap": "jobs/worker.py RenderWorker (checks its machine, starts its lease)",
    "check_for_suspension": "jobs/worker.py RenderWorker (goes on while Redis is away)",
    "dequeue_job_and_maintain_ttl": "jobs/worker.py RenderWorker (takes a job into its taken list, while healthy)",
    "execute_job": "jobs/worker.py RenderWorker (settles a job whose horse ended unheard); jobs/webhooks.py "
    "ConcurrentDeliveries (deliveries in threads)",
    "handle_exception": "jobs/worker.py ClipWorker (a project error logged in one line, no traceback)",
    "handle_job_failure": "jobs/worker.py RenderWorker (hands back the job of a horse that died)",
    "heartbeat": "jobs/worker.py RenderWorker (goes on while Redis is away)",
    "main_work_horse": "jobs/worker.py RenderWorker (the horse dies with its worker)",
    "maintain_heartbeats": "jobs/worker.py RenderWorker (goes on while Redis is away)",
    "monitor_work_horse": "jobs/worker.py ClipWorker (sweeps a killed render's temp folder)",
    "prepare_execution": "jobs/worker.py RenderWorker (keeps the job's Execution for settling)",
    "prepare_job_execution": "jobs/worker.py RenderWorker (the started job leaves the taken list)",
    "request_stop": "jobs/worker.py ClipWorker and RenderWorker (the shutdown grace, hand-back on SIGTERM)",
    "run_maintenance_tasks": "jobs/worker.py ClipWorker (requeues lost jobs) and RenderWorker (Redis away)",
    "set_state": "jobs/worker.py RenderWorker (goes on while Redis is away)",
    "teardown": "jobs/worker.py RenderWorker (drops its lease); jobs/webhooks.py ConcurrentDeliveries (waits for "
    "its deliveries)",
    "death_penalty_class": "jobs/webhooks.py ConcurrentDeliveries (TimerDeathPenalty: a timeout in a thread)",
    "_start_scheduler": "jobs/worker.py ClipWorker (rq's own, starting jobs/worker.py Scheduler instead)",
}

_SPECIAL = {"__module__", "__doc__", "__annotations__", "__dict__", "__weakref__", "__qualname__"}


def _defined(name: str) -> list[tuple[type, Any]]:
    return [(cls, vars(cls)[name]) for cls in OURS if name in vars(cls)]


def test_every_override_of_rq_is_listed_here() -> None:
    """A new override of an rq Worker method (or attribute) comes with its contract here; a listed one that is
    gone leaves the list."""
    found = {name for cls in OURS for name in vars(cls) if name not in _SPECIAL and hasattr(Worker, name)}
    assert found - set(OVERRIDES) == set(), (
        f"overrides of rq's Worker not listed in OVERRIDES: {found - set(OVERRIDES)}"
    )
    assert set(OVERRIDES) - found == set(), f"listed in OVERRIDES but overridden nowhere: {set(OVERRIDES) - found}"


@functools.cache
def _rq_trees() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted(Path(rq.__file__).parent.rglob("*.py"))]


def _rq_uses(name: str) -> list[tuple[str, tuple[int, tuple[str, ...]] | None]]:
    """Where rq itself uses ``name`` on a worker (``self.<name>`` in rq/worker/, ``worker.<name>`` anywhere):
    (where, how it calls it: positional count and keyword names), the call None where rq passes the method on
    (a signal handler) or spreads ``*args``/``**kwargs`` into it."""
    root = Path(rq.__file__).parent
    uses: list[tuple[str, tuple[int, tuple[str, ...]] | None]] = []
    for path, tree in _rq_trees():
        receivers = {"worker"} | ({"self"} if path.parent.name == "worker" else set())
        called: dict[int, ast.Call] = {id(node.func): node for node in ast.walk(tree) if isinstance(node, ast.Call)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load)):
                continue
            if not (isinstance(node.value, ast.Name) and node.value.id in receivers):
                continue
            where = f"rq/{path.relative_to(root)}:{node.lineno}"
            call = called.get(id(node))
            spread = (
                call is None
                or any(isinstance(a, ast.Starred) for a in call.args)
                or any(k.arg is None for k in call.keywords)
            )
            uses.append(
                (where, None if spread or call is None else (len(call.args), tuple(str(k.arg) for k in call.keywords)))
            )
    return uses


def _binds(sig: inspect.Signature, positional: int, keywords: tuple[str, ...]) -> str | None:
    try:
        sig.bind(object(), *[object()] * positional, **dict.fromkeys(keywords))
    except TypeError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("name", [n for n in OVERRIDES if n not in ("__init__", "death_penalty_class")])
def test_rq_still_calls_the_method_we_override_as_we_take_it(name: str) -> None:
    """rq's Worker still has the method, our override takes every way rq's own signature can be called (all its
    parameters by position, all by name), and every call rq makes to it binds to our override."""
    relied = f"relied on by {OVERRIDES[name]}"
    assert callable(getattr(Worker, name, None)), f"rq's Worker has no method {name} any more; {relied}"
    theirs = inspect.signature(getattr(Worker, name))
    params = [p for p in list(theirs.parameters.values())[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    uses = _rq_uses(name)
    assert uses, f"rq no longer uses Worker.{name}: our override would never run; {relied}"
    for cls, method in _defined(name):
        ours = inspect.signature(method)
        by_position = _binds(ours, len(params), ())
        by_name = _binds(ours, 0, tuple(p.name for p in params))
        assert by_position is None and by_name is None, (
            f"rq's Worker.{name}{theirs} is not what {cls.__name__}.{name}{ours} takes ({by_position or by_name}); "
            f"{relied}"
        )
        for where, how in uses:
            if how is None:
                continue
            positional, keywords = how
            problem = _binds(ours, positional, keywords)
            assert problem is None, (
                f"{where} calls {name} with {positional} positional and {keywords} keyword arguments, which "
                f"{cls.__name__}.{name}{ours} does not take ({problem}); {relied}"
            )


def _body(function: Any) -> str:
    """A function's statements (its docstring left out), as the parser reads them."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    assert isinstance(tree, ast.FunctionDef)
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) else tree.body
    return "\n".join(ast.dump(statement) for statement in body)


def test_our_start_of_the_scheduler_is_rqs_own_with_our_scheduler() -> None:
    """``ClipWorker._start_scheduler`` is rq's ``Worker._start_scheduler`` statement for statement, but for the
    class it starts (jobs/worker.py ``Scheduler``); and rq's scheduler process still runs ``scheduler.work()``, the
    method ``Scheduler`` wraps to say a lost Redis in one line."""
    import rq.scheduler

    from jobs.worker import Scheduler

    theirs = _body(BaseWorker._start_scheduler).replace("id='RQScheduler'", "id='Scheduler'")
    assert _body(ClipWorker._start_scheduler) == theirs, (
        "rq's Worker._start_scheduler changed: copy it again into jobs/worker.py ClipWorker._start_scheduler"
    )
    assert "scheduler.work()" in inspect.getsource(rq.scheduler.run), "rq's scheduler process no longer runs work()"
    assert Scheduler.work is not rq.scheduler.RQScheduler.work and callable(rq.scheduler.RQScheduler.work)


def test_work_calls_the_loop_methods_we_override() -> None:
    """``Worker.work`` is the loop our overrides hook into: it bootstraps, checks for suspension, runs the
    maintenance pass, waits for a job with (timeout, max_idle_time), executes it and tears down at the end."""
    source = inspect.getsource(BaseWorker.work)
    for call in (
        "self.bootstrap(",
        "self.check_for_suspension(burst)",
        "self.run_maintenance_tasks()",
        "self.dequeue_job_and_maintain_ttl(timeout, max_idle_time)",
        "self.execute_job(job, queue)",
        "self.teardown()",
    ):
        assert call in source, f"rq's Worker.work no longer calls {call}…); relied on by jobs/worker.py RenderWorker"


def test_work_ends_its_loop_on_stop_requested() -> None:
    """RenderWorker's wait for a job raises StopRequested when told to stop (even with Redis away): rq's loop
    must catch it and end, tearing down, rather than logging an unhandled exception."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(BaseWorker.work)))
    handlers = [
        h
        for node in ast.walk(tree)
        if isinstance(node, ast.Try)
        for h in node.handlers
        if isinstance(h.type, ast.Name) and h.type.id == "StopRequested"
    ]
    assert handlers and isinstance(handlers[0].body[0], ast.Break), (
        "rq's Worker.work no longer ends its loop on StopRequested; relied on by jobs/worker.py RenderWorker._take_job"
    )
    assert rq.exceptions.StopRequested is importlib.import_module("jobs.worker").StopRequested


def test_request_stop_of_an_idle_worker_raises_stop_requested() -> None:
    """RenderWorker.request_stop ends with rq's own (``Worker.request_stop``): idle, it raises StopRequested
    (the loop ends); busy, it lets the horse finish."""
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        worker = _worker()
        worker.pid = os.getpid()
        with pytest.raises(rq.exceptions.StopRequested):
            worker.request_stop(signal.SIGTERM, None)
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])
    source = inspect.getsource(BaseWorker._shutdown)
    assert "WorkerStatus.BUSY" in source and "self._stop_requested = True" in source, (
        "rq's warm shutdown no longer waits for a busy worker's horse; relied on by jobs/worker.py request_stop"
    )


def test_a_killed_horse_reaches_our_handler_before_the_failure_is_handled() -> None:
    """RenderWorker no longer overrides handle_work_horse_killed: rq's calls the ``work_horse_killed_handler``
    given to the constructor with (job, retpid, ret_val, rusage), and rq's monitor calls it before
    handle_job_failure, which reads what the handler noted."""
    worker = _worker(RenderWorker)
    job = _job()
    worker.handle_work_horse_killed(job, 4242, 9, None)  # waitpid's status of a SIGKILL
    assert worker._lost == (job.id, "died", "signal 9"), (
        "rq's handle_work_horse_killed did not call the work_horse_killed_handler; relied on by jobs/worker.py "
        "RenderWorker.horse_killed"
    )
    source = inspect.getsource(Worker.monitor_work_horse)
    killed, failure = source.find("self.handle_work_horse_killed("), source.find("self.handle_job_failure(")
    assert 0 <= killed < failure, (
        "rq's monitor_work_horse no longer calls handle_work_horse_killed before handle_job_failure; relied on by "
        "jobs/worker.py RenderWorker.handle_job_failure"
    )


def test_handle_exception_logs_then_runs_the_exception_handlers() -> None:
    """ClipWorker.handle_exception skips rq's log line for a project error and runs the handlers itself, with
    rq's ``call_exception_handlers(self._exc_handlers, job, *exc_info)``: the same as rq's minus the line."""
    source = inspect.getsource(BaseWorker.handle_exception)
    assert "call_exception_handlers(self._exc_handlers, job, *exc_info)" in source, (
        "rq's handle_exception no longer ends with call_exception_handlers(self._exc_handlers, …); relied on by "
        "jobs/worker.py ClipWorker.handle_exception"
    )
    seen: list[tuple[Any, ...]] = []

    def handler(*args: Any) -> None:
        seen.append(args)

    job, error = _job(), ValueError("x")
    worker = _worker(exception_handlers=[handler])
    rq.job_lifecycle.call_exception_handlers(worker._exc_handlers, job, ValueError, error, None)
    assert seen == [(job, ValueError, error, None)], (
        "rq's exception handlers (the constructor's exception_handlers, kept in _exc_handlers) are no longer "
        "called with (job, *exc_info); relied on by jobs/worker.py ClipWorker.handle_exception"
    )


# ---- rq names we call -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One way our code calls an rq or redis-py callable: ``target`` as ``module:Qualified.name``, the number of
    positional arguments and the keyword names we pass (a method's self not counted)."""

    target: str
    used_by: str
    args: int = 0
    kwargs: tuple[str, ...] = ()

    def resolve(self) -> tuple[Any, Any]:
        module, _, path = self.target.partition(":")
        owner: Any = None
        found: Any = importlib.import_module(module)
        for part in path.split("."):
            owner, found = found, getattr(found, part)
        return owner, found


RQ_CALLS = [
    Call(
        "rq.worker:Worker",
        "jobs/worker.py run_worker, _render_worker",
        1,
        (
            "connection",
            "name",
            "job_monitoring_interval",
            "maintenance_interval",
            "worker_ttl",
            "work_horse_killed_handler",
        ),
    ),
    Call("rq.worker:Worker.work", "jobs/worker.py run_worker", 0, ("burst", "logging_level", "with_scheduler")),
    Call("rq.job_lifecycle:call_exception_handlers", "jobs/worker.py ClipWorker.handle_exception", 5),
    Call(
        "rq.queue:Queue.from_queue_key",
        "jobs/worker.py RenderWorker._fetch_taken",
        1,
        (
            "connection",
            "job_class",
            "serializer",
            "death_penalty_class",
        ),
    ),
    Call("rq.worker:Worker.reorder_queues", "jobs/worker.py RenderWorker._fetch_taken", 0, ("reference_queue",)),
    Call("rq.worker:Worker.get_redis_server_version", "jobs/worker.py RenderWorker._fetch_taken"),
    Call("rq.worker:Worker.procline", "jobs/worker.py RenderWorker._take_job", 1),
    Call("rq.worker:Worker.queue_names", "jobs/worker.py RenderWorker._take_job, Lease"),
    Call("rq.worker:Worker.get_current_job_id", "jobs/worker.py RenderWorker.request_stop"),
    Call("rq.worker:Worker.kill_horse", "jobs/worker.py RenderWorker._wind_down"),
    Call("rq.job:Job.fetch", "jobs/worker.py, jobs/maintenance.py, jobs/reconcile.py", 1, ("connection", "serializer")),
    Call("rq.job:Job.get_status", "jobs/worker.py, jobs/reconcile.py, jobs/status.py", 0, ("refresh",)),
    Call("rq.job:Job.get_meta", "jobs/maintenance.py give_back, jobs/worker.py _time_left", 0, ("refresh",)),
    Call("rq.job:Job.refresh", "jobs/worker.py RenderWorker.handle_job_failure"),
    Call("rq.job:Job.save", "jobs/maintenance.py fail_job", 0, ("pipeline",)),
    Call("rq.job:Job.key_for", "jobs/maintenance.py reclaim_lost, jobs/reconcile.py put_back", 1),
    Call("rq.queue:Queue._enqueue_job", "jobs/maintenance.py give_back", 1, ("pipeline", "at_front")),
    Call("rq.queue:Queue.enqueue_job", "jobs/reconcile.py requeue_lost", 1),
    Call("rq.queue:Queue.enqueue_dependents", "jobs/maintenance.py fail_job", 1, ("refresh_job_status",)),
    Call("rq.job_lifecycle:record_job_failure", "jobs/maintenance.py fail_job", 3),
    Call("rq.executions:Execution", "jobs/maintenance.py reclaim_lost", 3, ("worker_name",)),
    Call(
        "rq.executions:Execution.delete",
        "jobs/maintenance.py give_back, fail_job; jobs/worker.py",
        0,
        (
            "job",
            "pipeline",
        ),
    ),
    Call("rq.registry:StartedJobRegistry", "jobs/maintenance.py reclaim_lost", 0, ("queue",)),
    Call("rq.utils:parse_composite_key", "jobs/maintenance.py reclaim_lost", 1),
    Call("rq.utils:utcparse", "jobs/maintenance.py reclaim_lost", 1),
    Call("rq.worker:BaseWorker.perform_job", "jobs/webhooks.py ConcurrentDeliveries._perform", 3),
    Call("rq.worker:BaseWorker.prepare_execution", "jobs/webhooks.py ConcurrentDeliveries.execute_job", 1),
    Call("rq.timeouts:TimerDeathPenalty", "jobs/webhooks.py ConcurrentDeliveries (rq calls it)", 2, ("job_id",)),
    Call("rq:Retry", "jobs/queue.py, jobs/webhooks.py, jobs/tasks.py", 0, ("max", "interval", "enqueue_at_front")),
    Call("rq:Callback", "jobs/queue.py _enqueue_one", 1),
    Call("rq.job:Dependency", "jobs/queue.py _enqueue_one", 0, ("jobs", "allow_failure")),
    Call("rq:get_current_job", "jobs/tasks.py, quoteclip/logs.py, sources/extraction.py"),
]


def _needs_self(owner: Any, name: str, found: Any) -> bool:
    static = inspect.getattr_static(owner, name) if inspect.isclass(owner) else None
    return inspect.isfunction(found) and inspect.isclass(owner) and not isinstance(static, staticmethod | classmethod)


def _check_call(call: Call, library: str) -> None:
    try:
        owner, found = call.resolve()
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{call.target} is gone from {library} ({exc}); relied on by {call.used_by}")
    name = call.target.rpartition(":")[2].rpartition(".")[2]
    sig = inspect.signature(found)
    extra = [object()] if _needs_self(owner, name, found) else []
    try:
        sig.bind(*extra, *[object()] * call.args, **dict.fromkeys(call.kwargs))
    except TypeError as exc:
        pytest.fail(
            f"{call.target}{sig} does not take {call.args} positional and {call.kwargs} keyword arguments ({exc}); "
            f"relied on by {call.used_by}"
        )


@pytest.mark.parametrize("call", RQ_CALLS, ids=lambda c: c.target)
def test_rq_takes_the_arguments_we_pass(call: Call) -> None:
    _check_call(call, f"rq {rq.__version__}")


ENQUEUE_OPTIONS = {
    "job_id": "x",
    "unique": True,
    "retry": rq.Retry(max=3, interval=[2, 10, 30]),
    "job_timeout": 60,
    "result_ttl": 60,
    "failure_ttl": 60,
    "description": "clip",
    "meta": {"stage": "queued"},
    "depends_on": None,
    "on_success": rq.Callback("jobs.webhooks.on_success"),
    "on_failure": rq.Callback("jobs.webhooks.on_failure"),
}


def test_enqueue_reads_every_option_we_pass() -> None:
    """``Queue.enqueue`` takes its options among the task's keyword arguments: one rq stopped reading would be
    passed to the task instead. jobs/queue.py and jobs/webhooks.py pass these."""
    parsed = Queue.parse_args("jobs.tasks.render_job", {"spec": 1}, **ENQUEUE_OPTIONS)
    assert parsed.kwargs == {}, (
        f"rq's enqueue no longer reads {sorted(parsed.kwargs)}: they would reach the task; relied on by "
        "jobs/queue.py _enqueue_one, _enqueue_group and jobs/webhooks.py queue_deliveries"
    )
    assert parsed.job_id == "x" and parsed.unique is True and parsed.timeout == 60


def test_the_exceptions_we_catch_are_still_there() -> None:
    for module, name, used_by in [
        ("rq.exceptions", "StopRequested", "jobs/worker.py _take_job, run_worker"),
        ("rq.exceptions", "NoSuchJobError", "jobs/worker.py, jobs/maintenance.py, jobs/reconcile.py, jobs/status.py"),
        ("rq.exceptions", "DuplicateJobError", "jobs/queue.py (rq's unique enqueue)"),
        ("rq.timeouts", "JobTimeoutException", "jobs/tasks.py TRANSIENT"),
    ]:
        found = getattr(importlib.import_module(module), name, None)
        assert isinstance(found, type) and issubclass(found, BaseException), (
            f"{module}.{name} is gone; relied on by {used_by}"
        )


# ---- rq's worker attributes and Redis layout ------------------------------------------------------------------------


def test_worker_settings_and_attributes_we_read() -> None:
    """The constructor's options land where rq reads them, and the attributes RenderWorker._take_job uses
    instead of rq's dequeue are there: ``_ordered_queues`` (in order), ``dequeue_timeout`` (worker_ttl - 15,
    which run_worker's idle wake-up counts on), ``max_connection_wait_time``, ``should_run_maintenance_tasks``."""
    relied = "relied on by jobs/worker.py run_worker, _render_worker, RenderWorker._take_job"
    worker = _worker(worker_ttl=75, maintenance_interval=60, job_monitoring_interval=7)
    assert (worker.worker_ttl, worker.maintenance_interval, worker.job_monitoring_interval) == (75, 60, 7), relied
    assert worker.dequeue_timeout == 60, f"rq's dequeue timeout is no longer worker_ttl - 15; {relied}"
    assert [q.key for q in worker._ordered_queues] == ["rq:queue:clips", "rq:queue:clips:bulk"], relied
    worker.reorder_queues(reference_queue=worker._ordered_queues[0])  # the default strategy: the clicks stay first
    assert [q.name for q in worker._ordered_queues] == ["clips", "clips:bulk"], relied
    assert isinstance(worker.max_connection_wait_time, float), relied
    assert worker.should_run_maintenance_tasks is True, relied  # first pass at once
    assert worker.horse_pid == 0 and worker.is_horse is False, relied
    assert WorkerStatus.IDLE.value == "idle" and WorkerStatus.BUSY.value == "busy", relied
    assert dict(inspect.signature(Worker.kill_horse).parameters)["sig"].default == signal.SIGKILL, (
        "rq's kill_horse no longer sends SIGKILL by default; relied on by jobs/worker.py RenderWorker._wind_down"
    )


def test_job_statuses_are_the_strings_the_lua_compares() -> None:
    relied = "relied on by jobs/reconcile.py _PUT_BACK ('queued'), jobs/worker.py _settle, jobs/maintenance.py"
    assert JobStatus.QUEUED.value == "queued", relied
    assert JobStatus.STARTED.value == "started", relied
    assert (JobStatus.FINISHED.value, JobStatus.FAILED.value) == ("finished", "failed"), relied


def test_queue_keys_are_the_prefix_and_the_name() -> None:
    """jobs/reconcile.py's _PUT_BACK finds a job's queue as ARGV[2] .. origin, with ``redis_queue_namespace_prefix``
    as ARGV[2]."""
    assert Queue.redis_queue_namespace_prefix == "rq:queue:", "relied on by jobs/reconcile.py put_back"
    queue = Queue("clips", connection=NOWHERE)
    assert queue.key == Queue.redis_queue_namespace_prefix + "clips", "relied on by jobs/reconcile.py put_back"
    assert Queue.from_queue_key(queue.key, connection=NOWHERE).name == "clips", "relied on by jobs/worker.py"
    assert Job.key_for("j1") == "rq:job:j1", "relied on by jobs/reconcile.py put_back, jobs/maintenance.py"


def test_enqueue_at_front_writes_status_and_origin_and_pushes_left() -> None:
    """What give_back's ``queue._enqueue_job(job, pipeline=pipe, at_front=True)`` writes: the job's hash with
    ``status`` queued and ``origin`` its queue's name (the fields _PUT_BACK reads), and an LPUSH onto the
    queue's key (the front, where rq and our _TAKE's LMOVE … LEFT take from)."""
    queue = Queue("clips", connection=NOWHERE)
    queue.redis_server_version = (7, 2, 0)  # asked of Redis otherwise
    pipe = _pipeline()
    queue._enqueue_job(_job(origin="elsewhere"), pipeline=pipe, at_front=True)
    commands = _recorded(pipe)
    fields: dict[str, Any] = {}
    for command in commands:
        if command[0] == "HSET" and command[1] == "rq:job:j1":
            fields.update(zip(command[2::2], command[3::2], strict=True))
    relied = "relied on by jobs/reconcile.py _PUT_BACK and jobs/maintenance.py give_back"
    assert fields.get("status") == JobStatus.QUEUED and fields.get("origin") == "clips", f"{fields}; {relied}"
    assert ("LPUSH", "rq:queue:clips", "j1") in commands, f"{commands}; {relied}"


def test_a_started_job_records_its_worker_and_heartbeat_in_its_hash() -> None:
    """jobs/maintenance.py reclaim_lost reads ``status``, ``worker_name`` and ``last_heartbeat`` from the job's
    hash (the heartbeat with rq's utcparse); jobs/worker.py _settle reads ``status`` and ``worker_name``."""
    pipe = _pipeline()
    _job().prepare_for_execution("worker-1", pipeline=pipe)
    fields: dict[str, Any] = {}
    for command in _recorded(pipe):
        if command[0] == "HSET" and command[1] == "rq:job:j1":
            fields.update(zip(command[2::2], command[3::2], strict=True))
    relied = "relied on by jobs/maintenance.py reclaim_lost and jobs/worker.py RenderWorker._settle"
    assert fields.get("status") == JobStatus.STARTED and fields.get("worker_name") == "worker-1", f"{fields}; {relied}"
    assert rq.utils.utcparse(fields["last_heartbeat"]), relied


def test_started_registry_members_are_composite_keys_we_can_split() -> None:
    """The started registry holds ``<job id>:<execution id>``; reclaim_lost splits each with parse_composite_key
    and rebuilds the Execution to delete it."""
    relied = "relied on by jobs/maintenance.py reclaim_lost"
    assert rq.utils.parse_composite_key("a:b") == ("a", "b"), relied
    execution = Execution("e1", "j1", NOWHERE, worker_name="w")
    assert execution.composite_key == "j1:e1", relied
    registry = StartedJobRegistry(queue=Queue("clips", connection=NOWHERE))
    pipe = _pipeline()
    execution.heartbeat(registry, 30, pipeline=pipe)
    zadds = [c for c in _recorded(pipe) if c[0] == "ZADD" and c[1] == registry.key]
    assert zadds and zadds[0][-1] == "j1:e1", f"{_recorded(pipe)}; {relied}"
    assert rq.utils.parse_composite_key(zadds[0][-1]) == ("j1", "e1"), relied


# ---- redis-py -------------------------------------------------------------------------------------------------------

REDIS_CALLS = [
    Call("redis:Redis.blmove", "jobs/reconcile.py take", 5),
    Call("redis:Redis.lmove", "rq's dequeue (our _TAKE does LMOVE in Lua)", 4),
    Call("redis:Redis.lpos", "jobs/reconcile.py still_taken, taken_anywhere, requeue_lost", 2),
    Call("redis:Redis.eval", "jobs/reconcile.py take, put_back", 8),
    Call("redis:Redis.lindex", "jobs/reconcile.py leftover", 2),
    Call("redis:Redis.lrem", "jobs/reconcile.py started; jobs/maintenance.py give_back", 3),
    Call("redis:Redis.lrange", "jobs/reconcile.py reclaim_taken", 3),
    Call("redis:Redis.hmget", "jobs/maintenance.py reclaim_lost, paused; jobs/worker.py _settle", 4),
    Call("redis:Redis.hset", "jobs/maintenance.py renew_lease, pause_worker", 1, ("mapping",)),
    Call("redis:Redis.set", "jobs/worker.py Lease (the reconciler's lock)", 2, ("nx", "px")),
    Call("redis:Redis.zadd", "jobs/maintenance.py mark_pending", 2),
    Call("redis:Redis.zrange", "jobs/reconcile.py reclaim_taken", 3, ("withscores",)),
    Call("redis:Redis.zrangebyscore", "jobs/reconcile.py requeue_lost", 3),
    Call("redis:Redis.pipeline", "jobs/maintenance.py renew_lease, drop_worker", 0, ("transaction",)),
]


@pytest.mark.parametrize("call", REDIS_CALLS, ids=lambda c: c.target)
def test_redis_py_takes_the_arguments_we_pass(call: Call) -> None:
    _check_call(call, f"redis-py {redis.__version__}")


def test_blmove_sends_its_arguments_in_the_order_we_pass_them() -> None:
    """jobs/reconcile.py take calls ``blmove(queue, taken, timeout, "LEFT", "RIGHT")``: from the queue's front
    to the taken list's back."""
    pipe = _pipeline()
    pipe.blmove("rq:queue:clips", "taken", 3, "LEFT", "RIGHT")
    pipe.lpos("taken", "j1")
    assert _recorded(pipe) == [
        ("BLMOVE", "rq:queue:clips", "taken", "LEFT", "RIGHT", 3),
        ("LPOS", "taken", "j1"),
    ], "relied on by jobs/reconcile.py take, still_taken"


def test_redis_errors_we_catch_are_one_family() -> None:
    """jobs/worker.py catches redis-py's ConnectionError and TimeoutError to wait for Redis, and RedisError to go
    on past any Redis failure; both are RedisErrors, and neither is Python's own ConnectionError/TimeoutError
    (jobs/tasks.py lists those apart)."""
    for name in ("ConnectionError", "TimeoutError"):
        error = getattr(redis.exceptions, name)
        assert issubclass(error, redis.exceptions.RedisError), f"redis.exceptions.{name}; relied on by jobs/worker.py"
    assert not issubclass(redis.exceptions.ConnectionError, ConnectionError), "relied on by jobs/tasks.py TRANSIENT"
