"""An incremental Server-Sent Events decoder: bytes as they come off the socket in, complete events out.

It follows the WHATWG HTML "event stream" interpretation rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):

- lines end in ``\\r\\n``, ``\\n`` or ``\\r``; a ``\\r\\n`` split across two reads is still one line end;
- one UTF-8 byte order mark at the very start of the stream is skipped;
- a line starting with ``:`` is a comment (keep-alives such as ``: ping``) and is ignored;
- ``field:value`` loses one space after the colon, if there is one; a line without a colon is a field
  whose value is empty; fields other than ``event``, ``data``, ``id`` and ``retry`` are ignored;
- ``data`` lines accumulate, joined with ``\\n``; a blank line dispatches the event, unless no ``data``
  line was seen, in which case the buffers are just reset;
- ``id`` (ignored if it contains NUL) sets the last event id, which persists across events;
  ``retry`` counts only if it is all ASCII digits;
- an event that has not been dispatched when the stream ends is discarded; :meth:`SseDecoder.finish`
  says whether that happened, so a caller can tell a cut stream from a clean end.

Bytes are decoded as UTF-8 (invalid sequences become U+FFFD) per complete line, so a read that splits a
multi-byte character is harmless. The decoder works on whole buffers (``bytes.rfind``, ``splitlines``)
rather than byte by byte, because it sits on the load generator's hot path.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliffwatch.domain.errors import CliffwatchError

DEFAULT_MAX_PENDING = 1 << 20  # 1 MiB of an unfinished line, or of an unfinished event's data
_BOM = b"\xef\xbb\xbf"
_COLON = 0x3A


class SseLineTooLong(CliffwatchError):
    """The stream kept sending without ending a line (or an event) past the decoder's limit."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(f"SSE {what} exceeds {limit} bytes ({size} buffered without an end)")


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event. ``retry`` is the reconnection time set within this event's lines, if any."""

    data: str
    event: str = "message"
    id: str = ""  # the last event id when this event was dispatched ("" if none was ever set)
    retry: int | None = None


class SseDecoder:
    """Feeds on byte chunks split anywhere and returns the events completed by each chunk.

    ``max_pending`` bounds the memory one misbehaving stream can hold: the bytes of an unfinished line,
    and the data of one event (complete data lines included, since they wait for the event's blank
    line); past it :meth:`feed` raises :class:`SseLineTooLong`.
    """

    __slots__ = (
        "_data",
        "_data_size",
        "_event_type",
        "_fields_seen",
        "_partial",
        "_retry",
        "_skip_lf",
        "_started",
        "last_event_id",
        "max_pending",
        "retry_ms",
    )

    def __init__(self, *, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.max_pending = max_pending
        self.last_event_id = ""
        self.retry_ms: int | None = None  # the stream's reconnection time, once a ``retry`` field set it
        self._partial = bytearray()  # an unfinished line (or the first bytes, while a BOM may be forming)
        self._skip_lf = False  # the last chunk ended in "\r": a "\n" opening the next one ends nothing
        self._started = False  # past the position where a BOM may appear
        self._data: list[str] = []
        self._data_size = 0
        self._event_type = ""
        self._retry: int | None = None
        self._fields_seen = False  # a field line arrived since the last blank line

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events that ``chunk`` completes, in order; raises SseLineTooLong past ``max_pending``."""
        if not self._started:
            chunk = self._strip_bom(chunk)
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
                if not chunk:
                    return []
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if end < 0:
            self._partial += chunk
            if len(self._partial) > self.max_pending:
                raise SseLineTooLong("line", len(self._partial), self.max_pending)
            return []
        if self._partial:
            self._partial += chunk[: end + 1]
            lines = bytes(self._partial).splitlines()
            self._partial.clear()
        else:
            lines = chunk[: end + 1].splitlines()
        if end + 1 < len(chunk):
            self._partial += chunk[end + 1 :]
            if len(self._partial) > self.max_pending:
                raise SseLineTooLong("line", len(self._partial), self.max_pending)
        elif chunk[end] == 0x0D:
            self._skip_lf = True
        return self._lines(lines)

    def plain_data(self, chunk: bytes) -> list[bytes] | None:
        """The data of the events ``chunk`` holds when it is nothing but whole events of one ``data: `` line
        each, with nothing buffered before it (what inference servers send, a token an event), so that
        :meth:`feed` would return exactly these events' data, typed ``message``, and keep its state; None
        otherwise, and then :meth:`feed` must read ``chunk``. It leaves the decoder as it was."""
        if not self._started or self._partial or self._fields_seen or self._skip_lf:
            return None
        if not chunk.startswith(b"data: ") or not chunk.endswith(b"\n\n") or b"\r" in chunk:
            return None
        parts = chunk.split(b"\n\n")
        parts.pop()  # the empty remainder after the last blank line
        if chunk.count(b"\n") != 2 * len(parts):  # a line of its own inside some event
            return None
        values = []
        for part in parts:
            if not part.startswith(b"data: ") or len(part) - 5 > self.max_pending:
                return None
            values.append(part[6:])
        return values

    def finish(self) -> bool:
        """Ends the stream; True if it ended mid-event (that incomplete event is discarded, not dispatched).

        Mid-event means an unterminated line was buffered or field lines arrived after the last blank
        line. A stream that ends right after a complete event, or after comments only, ended cleanly.
        """
        pending = bool(self._partial) or self._fields_seen
        self._partial.clear()
        self._reset_event()
        self._skip_lf = False
        return pending

    @property
    def pending(self) -> bool:
        """Whether part of an event (or of a line) is buffered, waiting for more bytes."""
        return bool(self._partial) or self._fields_seen

    def _strip_bom(self, chunk: bytes) -> bytes:
        # The BOM itself may arrive split across reads: hold back bytes that could still be one.
        self._partial += chunk
        head = bytes(self._partial)
        if len(head) < len(_BOM) and _BOM.startswith(head):
            return b""
        self._started = True
        self._partial.clear()
        return head[len(_BOM) :] if head.startswith(_BOM) else head

    def _lines(self, lines: list[bytes]) -> list[SseEvent]:
        events: list[SseEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(self._dispatch())
                else:
                    self._reset_event()
                continue
            if line[0] == _COLON:
                continue
            colon = line.find(b":")
            if colon < 0:
                field, value = line, b""
            else:
                field = line[:colon]
                start = colon + 2 if line[colon + 1 : colon + 2] == b" " else colon + 1
                value = line[start:]
            self._field(field, value)
        return events

    def _field(self, field: bytes, value: bytes) -> None:
        if field == b"data":
            self._data.append(value.decode("utf-8", "replace"))
            self._data_size += len(value) + 1
            if self._data_size > self.max_pending:
                raise SseLineTooLong("event data", self._data_size, self.max_pending)
        elif field == b"event":
            self._event_type = value.decode("utf-8", "replace")
        elif field == b"id":
            if b"\x00" not in value:
                self.last_event_id = value.decode("utf-8", "replace")
        elif field == b"retry":
            if value and value.isdigit():  # bytes.isdigit is ASCII-only, as the spec requires
                self._retry = self.retry_ms = int(value)
        else:
            return  # unknown fields are ignored and do not make an event pending
        self._fields_seen = True

    def _dispatch(self) -> SseEvent:
        data = self._data[0] if len(self._data) == 1 else "\n".join(self._data)
        event = SseEvent(data, self._event_type or "message", self.last_event_id, self._retry)
        self._reset_event()
        return event

    def _reset_event(self) -> None:
        self._data = []
        self._data_size = 0
        self._event_type = ""
        self._retry = None
        self._fields_seen = False
