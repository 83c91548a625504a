"""What the generator unit tests share: a listener that keeps each finished record by its id."""

from __future__ import annotations

from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.traffic.plan import PlannedRequest


class Listener:
    """Keeps every finished record by request id; a request finished twice fails the test."""

    def __init__(self) -> None:
        self.records: dict[int, RequestRecord] = {}

    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        pass

    def finished(self, record: RequestRecord) -> None:
        assert record.id not in self.records
        self.records[record.id] = record
