"""The preparation stage: a scenario in, a :class:`~cliffwatch.domain.workload.prepared.PreparedRun` out.

Every file the scenario names is read here and nowhere else: its traces, its dataset, its tokenizer and chat
template. Its prompts are planned, and the caps are judged on the workload as it will be sent (each trace
request's and dataset entry's lengths, a trace's real rates), before any load. ``validate``, ``run``, ``sweep``
and the service's worker all prepare through here; the generator workers get the prepared prompts.

It runs within bounds (:class:`~cliffwatch.domain.workload.prepared.PreparationLimits`): each file's bytes and
rows, a chat template's render time and output, and the whole preparation's time and memory, watched by a
:class:`~cliffwatch.adapters.workload.bounds.Watchdog`. A bound that is hit is a validation problem naming the
field, the file and the bound. :func:`prepare_off_loop` does the same in a worker thread, so a service's event
loop (its health checks, lease renewals, stop-all) keeps answering while a 35 MB trace is read; a stop while it
prepares ends the preparation at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cliffwatch.adapters.loadgen.prompt_setup import TOKENIZER_FIELD, prompt_plan
from cliffwatch.adapters.loadgen.token_prompts import TokenizerUnavailable
from cliffwatch.adapters.workload.bounds import BoundExceeded, Watchdog
from cliffwatch.adapters.workload.dataset_files import FIELD as DATASET_FIELD
from cliffwatch.adapters.workload.dataset_files import dataset_notes, load_dataset
from cliffwatch.adapters.workload.trace_files import load_traces
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.errors import Problem, RunRefused, ScenarioInvalid
from cliffwatch.domain.scenario.dataset import with_dataset
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.trace import trace_notes
from cliffwatch.domain.service.caps import Caps, cap_violations, sweep_cap_violations
from cliffwatch.domain.service.file_caps import clamp_dataset, clamp_traces
from cliffwatch.domain.workload.prepared import Clamped, PreparationLimits, PreparedRun

NOTHING_TO_READ = ""


class Preparation:
    """One preparation of ``scenario``: :meth:`run` does it (in whatever thread calls it), :meth:`stop` ends it
    from any other thread (a run stopped while it prepares)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        caps: Caps,
        limits: PreparationLimits,
        data_dirs: tuple[Path, ...] | None,
        sweep: SweepSpec | None = None,
    ) -> None:
        self.scenario = scenario
        self.caps = caps
        self.limits = limits
        self.data_dirs = data_dirs
        self.sweep = sweep
        self._watchdog = Watchdog(limits)
        self._reading = ("", NOTHING_TO_READ)  # the field and the file being read, for a bound's problem
        self._stopped: str | None = None

    def stop(self, reason: str) -> None:
        self._stopped = reason
        self._watchdog.end(reason)

    def run(self) -> PreparedRun:
        """The prepared run; raises ``ScenarioInvalid`` (a file that cannot be used, a bound that was hit, naming
        the field and file) or ``RunRefused`` (over the caps)."""
        with self._watchdog as watchdog:
            try:
                prepared = watchdog.run(self._prepare)
            except BoundExceeded as exc:
                field, path = self._reading
                where = f"{path}: " if path else ""
                raise ScenarioInvalid([Problem(path=field or "scenario", message=f"{where}{exc.message}")],
                                      source=self.scenario.name) from None  # fmt: skip
        if self._stopped is not None:  # stopped as it ended: nothing prepared is used
            raise ScenarioInvalid([Problem(path="scenario", message=self._stopped)], source=self.scenario.name)
        assert isinstance(prepared, PreparedRun)
        return prepared

    def _read(self, field: str, path: str) -> None:
        self._reading = (field, path)

    def _prepare(self) -> PreparedRun:
        scenario, caps, limits, dirs = self.scenario, self.caps, self.limits, self.data_dirs
        workload = load_traces(scenario, data_dirs=dirs, limits=limits, reading=self._read)
        workload, trace_prompts, trace_outputs = clamp_traces(
            workload, max_prompt=caps.max_prompt_tokens, max_output=caps.max_output_tokens
        )
        self._read(TOKENIZER_FIELD, scenario.target.request.tokenizer or NOTHING_TO_READ)
        plan, counter = prompt_plan(workload, builtin=scenario.target.is_builtin, data_dirs=dirs, limits=limits,
                                    watchdog=self._watchdog)  # fmt: skip
        spec = scenario.target.request.dataset
        self._read(DATASET_FIELD, NOTHING_TO_READ if spec is None else spec.path)
        try:
            dataset = load_dataset(workload, data_dirs=dirs, counter=counter, limits=limits)
        except TokenizerUnavailable as exc:  # its chat template, counting a dataset prompt
            raise ScenarioInvalid([Problem(path=TOKENIZER_FIELD, message=exc.reason)], source=scenario.name) from exc
        left_out = dataset_outputs = 0
        if dataset is not None and spec is not None:
            dataset, left_out, dataset_outputs = clamp_dataset(
                dataset, spec, max_prompt=caps.max_prompt_tokens, max_output=caps.max_output_tokens
            )
            if dataset is None:
                raise ScenarioInvalid([Problem(path=DATASET_FIELD, message=f"{spec.path}: every entry's prompt is "
                                       f"over the cap of {caps.max_prompt_tokens:,} tokens (CLIFFWATCH_MAX_PROMPT_"
                                       "TOKENS)")], source=scenario.name)  # fmt: skip
        workload = with_dataset(workload, None if dataset is None else dataset.sizes)
        self._read("", NOTHING_TO_READ)
        problems = cap_violations(workload, caps) if self.sweep is None else sweep_cap_violations(
            workload, self.sweep, caps)  # fmt: skip
        if problems:
            raise RunRefused(problems)
        clamped = Clamped(trace_prompts=trace_prompts, trace_outputs=trace_outputs, dataset_left_out=left_out,
                          dataset_outputs=dataset_outputs)  # fmt: skip
        notes = trace_notes(workload) + dataset_notes(workload, dataset)
        if clamped.any:
            notes += (clamped.note(caps.max_prompt_tokens, caps.max_output_tokens),)
        return PreparedRun(scenario=scenario, workload=workload, prompts=plan, dataset=dataset, notes=notes,
                           clamped=clamped)  # fmt: skip


def prepare(
    scenario: Scenario,
    *,
    caps: Caps,
    limits: PreparationLimits,
    data_dirs: tuple[Path, ...] | None,
    sweep: SweepSpec | None = None,
) -> PreparedRun:
    """``scenario`` prepared in this thread (``cliffwatch validate``; a thread of its own otherwise)."""
    return Preparation(scenario, caps=caps, limits=limits, data_dirs=data_dirs, sweep=sweep).run()


async def prepare_off_loop(
    scenario: Scenario,
    *,
    caps: Caps,
    limits: PreparationLimits,
    data_dirs: tuple[Path, ...] | None,
    sweep: SweepSpec | None = None,
) -> PreparedRun:
    """``scenario`` prepared in a worker thread, the event loop free meanwhile; cancelled (a run stopped while
    it prepares), the preparation is ended where it is and the cancellation goes on."""
    preparation = Preparation(scenario, caps=caps, limits=limits, data_dirs=data_dirs, sweep=sweep)
    task = asyncio.ensure_future(asyncio.to_thread(preparation.run))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        preparation.stop("the run was stopped while it was being prepared")
        await asyncio.gather(task, return_exceptions=True)  # the thread ends at its next step; nothing is left
        raise
