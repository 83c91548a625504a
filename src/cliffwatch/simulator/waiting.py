"""The simulated engine's waiting queue, in one of three orders: first come, priority, or fair among tenants.

- ``fifo``: arrival order, as vLLM's default ``--scheduling-policy fcfs``;
- ``priority``: the lowest ``priority`` first, arrival order among equals, as vLLM's ``--scheduling-policy
  priority`` (``vllm/v1/core/sched/request_queue.py``, ``PriorityRequestQueue``; a request's ``priority`` is
  documented as "lower means earlier handling" in ``vllm/entrypoints/openai/chat_completion/protocol.py``);
- ``fair``: the tenants (a request's OpenAI ``user`` field) take turns, each in arrival order, so one tenant's
  burst queues behind itself rather than ahead of everyone else; the engine also holds a tenant to its fair
  share of the batch while another waits (``BatchCore``).

Whatever the order, the queue also keeps every request in arrival order, so the oldest one (whose queue
deadline runs out first) is found at once and a client that leaves is removed from the middle in O(1).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from cliffwatch.domain.scenario.target_model import Scheduling


class Waiter(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def priority(self) -> int: ...

    @property
    def tenant(self) -> str: ...


W = TypeVar("W", bound=Waiter)


class WaitingQueue(Generic[W]):
    """Waiting requests in arrival order, handed out in the order of ``scheduling``."""

    def __init__(self, scheduling: Scheduling = Scheduling.FIFO) -> None:
        self.scheduling = scheduling
        self._by_arrival: OrderedDict[int, W] = OrderedDict()
        self._lanes: dict[object, OrderedDict[int, W]] = {}  # by priority, or by tenant
        self._turns: list[str] = []  # tenants in the order they first waited: whose turn comes next
        self._turn = 0

    def __len__(self) -> int:
        return len(self._by_arrival)

    def __bool__(self) -> bool:
        return bool(self._by_arrival)

    def __iter__(self) -> Iterator[W]:
        """In arrival order."""
        return iter(self._by_arrival.values())

    def push(self, request: W) -> None:
        self._by_arrival[request.id] = request
        if self.scheduling is Scheduling.FIFO:
            return
        key = self._key(request)
        self._lanes.setdefault(key, OrderedDict())[request.id] = request
        if self.scheduling is Scheduling.FAIR and request.tenant not in self._turns:
            self._turns.append(request.tenant)

    def push_front(self, request: W) -> None:
        """Puts a request back at the head of its lane (a preempted one: it resumes before its tenant's others)."""
        self.push(request)
        self._by_arrival.move_to_end(request.id, last=False)
        if self.scheduling is not Scheduling.FIFO:
            self._lanes[self._key(request)].move_to_end(request.id, last=False)

    def oldest(self) -> W | None:
        return next(iter(self._by_arrival.values()), None)

    def remove(self, request: W) -> None:
        del self._by_arrival[request.id]
        if self.scheduling is not Scheduling.FIFO:
            lane = self._lanes[self._key(request)]
            del lane[request.id]

    def tenants(self) -> set[str]:
        """The tenants with a request waiting (fair scheduling)."""
        return {str(key) for key, lane in self._lanes.items() if lane}

    def pop_next(self, allowed: Callable[[str], bool] | None = None) -> W | None:
        """The request to admit next: under fair scheduling, of the next tenant in turn that ``allowed`` lets
        in; None when no request (or none of an allowed tenant) waits."""
        if not self._by_arrival:
            return None
        if self.scheduling is Scheduling.FIFO:
            return self._by_arrival.popitem(last=False)[1]
        if self.scheduling is Scheduling.PRIORITY:
            lane: OrderedDict[int, W] | None = self._lanes[min(k for k, lane in self._lanes.items() if lane)]  # type: ignore[type-var]
        else:
            lane = self._next_tenant_lane(allowed)
        if lane is None:
            return None
        _, request = lane.popitem(last=False)
        del self._by_arrival[request.id]
        return request

    def _next_tenant_lane(self, allowed: Callable[[str], bool] | None) -> OrderedDict[int, W] | None:
        for step in range(len(self._turns)):
            tenant = self._turns[(self._turn + step) % len(self._turns)]
            lane = self._lanes.get(tenant)
            if lane and (allowed is None or allowed(tenant)):
                self._turn = (self._turn + step + 1) % len(self._turns)
                return lane
        return None

    def _key(self, request: W) -> object:
        return request.priority if self.scheduling is Scheduling.PRIORITY else request.tenant
