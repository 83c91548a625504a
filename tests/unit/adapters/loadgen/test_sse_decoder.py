from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cliffwatch.adapters.loadgen.sse import SseDecoder, SseEvent, SseLineTooLong

FIXTURES = Path(__file__).parents[3] / "fixtures" / "sse"
STREAMS = ("llamacpp-chat-stream.txt", "llamacpp-completions-stream.txt", "llamacpp-chat-stream-truncated.txt")


def decode(*chunks: bytes) -> list[SseEvent]:
    decoder = SseDecoder()
    events: list[SseEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def decode_in_pieces(data: bytes, size: int) -> tuple[list[SseEvent], bool]:
    decoder = SseDecoder()
    events: list[SseEvent] = []
    for start in range(0, len(data), size):
        events.extend(decoder.feed(data[start : start + size]))
    return events, decoder.finish()


def datas(events: list[SseEvent]) -> list[str]:
    return [event.data for event in events]


def test_a_data_line_and_a_blank_line_make_one_message_event() -> None:
    """The defaults of a plain event: type "message", no id, no retry."""
    assert decode(b"data: hello\n\n") == [SseEvent("hello", "message", "", None)]


@pytest.mark.parametrize("name", STREAMS)
def test_captured_streams_decode_to_one_event_per_data_line(name: str) -> None:
    """Each ``data:`` line of the captures is one event, its payload without the field name or the space."""
    raw = (FIXTURES / name).read_bytes()
    expected = [line[len(b"data: ") :].decode() for line in raw.split(b"\n") if line.startswith(b"data: ")]
    events, mid_event = decode_in_pieces(raw, len(raw))
    assert datas(events) == expected
    assert {event.event for event in events} == {"message"}
    assert not mid_event


@pytest.mark.parametrize("name", STREAMS)
def test_captured_streams_decode_the_same_whatever_the_read_size(name: str) -> None:
    """Reads of every size from one byte to the whole body yield the same events and the same clean end."""
    raw = (FIXTURES / name).read_bytes()
    whole = decode_in_pieces(raw, len(raw))
    for size in range(1, len(raw) + 1):
        assert decode_in_pieces(raw, size) == whole, f"read size {size}"


@given(st.data())
def test_any_partition_of_a_stream_yields_the_same_events(data: st.DataObject) -> None:
    """Cutting the bytes anywhere (inside a CRLF, inside a UTF-8 character, inside the BOM) changes nothing."""
    raw = (
        b"\xef\xbb\xbf: hello\r\nevent: greet\r\ndata: caf\xc3\xa9 \xf0\x9f\x98\x80\r\nid: 7\r\n\r\n"
        b"data: a\rdata: b\r\rretry: 250\ndata\n\n: ping\n\ndata: tail\n"
    )
    cuts = sorted(data.draw(st.sets(st.integers(min_value=1, max_value=len(raw) - 1), max_size=20)))
    bounds = [0, *cuts, len(raw)]
    decoder = SseDecoder()
    events: list[SseEvent] = []
    for start, end in itertools.pairwise(bounds):
        events.extend(decoder.feed(raw[start:end]))
    assert events == [
        SseEvent("café 😀", "greet", "7", None),
        SseEvent("a\nb", "message", "7", None),
        SseEvent("", "message", "7", 250),
    ]
    assert decoder.finish() is True  # "data: tail" never got its blank line


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"data: one\r\n\r\ndata: two\r\n\r\n", id="crlf"),
        pytest.param(b"data: one\r\rdata: two\r\r", id="cr"),
        pytest.param(b"data: one\n\ndata: two\n\n", id="lf"),
        pytest.param(b"data: one\r\n\rdata: two\n\r\n", id="mixed"),
    ],
)
def test_every_line_ending_ends_lines(raw: bytes) -> None:
    """CRLF, a lone CR and a lone LF are all line ends, and may be mixed in one stream."""
    assert datas(decode(raw)) == ["one", "two"]


def test_a_crlf_split_between_reads_is_one_line_end() -> None:
    """A "\\n" opening a read right after a read that ended in "\\r" does not add a blank line."""
    decoder = SseDecoder()
    assert decoder.feed(b"data: one\r") == []
    assert decoder.feed(b"\ndata: two\r\n") == []  # had the "\n" counted, "one" would dispatch here
    assert datas(decoder.feed(b"\r\n")) == ["one\ntwo"]


def test_an_event_ended_by_a_cr_dispatches_without_waiting_for_the_next_read() -> None:
    """The blank line ends at the "\\r": the event is out before we know whether a "\\n" follows."""
    decoder = SseDecoder()
    assert datas(decoder.feed(b"data: x\r\r")) == ["x"]
    assert decoder.feed(b"\n") == []  # the LF of the CRLF pair, not another line


def test_two_crs_in_a_row_are_two_line_ends() -> None:
    """A CR line end followed by a CRLF line end ("\\r\\r\\n") is two line ends, also across reads."""
    assert datas(decode(b"data: x\r", b"\r\n")) == ["x"]


def test_multi_line_data_is_joined_with_newlines() -> None:
    """Each data line adds its value and a newline; the final newline is dropped."""
    assert datas(decode(b'data: {\ndata:  "a": 1\ndata: }\n\n')) == ['{\n "a": 1\n}']


def test_only_one_space_after_the_colon_is_removed() -> None:
    """One space after the colon is dropped ("data:x" equals "data: x"); a second one is kept."""
    assert datas(decode(b"data:x\n\ndata: x\n\ndata:  x\n\n")) == ["x", "x", " x"]


def test_a_line_without_a_colon_is_a_field_with_an_empty_value() -> None:
    """A bare "data" line adds an empty line to the data, so it dispatches an event with empty data."""
    assert datas(decode(b"data\n\ndata\ndata\n\n")) == ["", "\n"]


def test_comments_and_keep_alives_are_ignored() -> None:
    """Lines starting with a colon, such as ": ping", are neither fields nor event ends."""
    decoder = SseDecoder()
    assert decoder.feed(b": ping\n\n:\n: keep-alive\ndata: x\n: mid-event comment\n\n") == [SseEvent("x")]
    assert decoder.feed(b": ping\n") == []
    assert decoder.finish() is False


def test_a_leading_bom_is_skipped_even_when_split_across_reads() -> None:
    """The byte order mark at the start of the stream is not part of the first field name."""
    assert datas(decode(b"\xef\xbb\xbfdata: x\n\n")) == ["x"]
    assert datas(decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n")) == ["x"]
    assert datas(decode(b"\xef\xbb", b"\xbf", b"", b"data: x\n\n")) == ["x"]


def test_a_bom_later_in_the_stream_is_not_skipped() -> None:
    """Only the first bytes of the stream may be a BOM: later it makes an unknown field name."""
    assert datas(decode(b"data: a\n\n\xef\xbb\xbfdata: b\n\ndata: c\n\n")) == ["a", "c"]


def test_a_stream_that_looks_like_a_bom_at_first_is_kept_whole() -> None:
    """Bytes held back while a BOM might be forming are decoded once they turn out not to be one."""
    assert datas(decode(b"\xef", b"\xbbX\ndata: y\n\n")) == ["y"]
    assert datas(decode(b"d", b"ata: y\n\n")) == ["y"]


def test_the_event_field_sets_the_type_of_one_event_only() -> None:
    """The type applies to the event it is in; the next event is a "message" again."""
    events = decode(b"event: error\ndata: x\n\ndata: y\n\n")
    assert [(event.event, event.data) for event in events] == [("error", "x"), ("message", "y")]


def test_the_last_event_id_persists_until_changed_and_ignores_nul() -> None:
    """An id carries over to later events; an id containing NUL is ignored; an empty id clears it."""
    events = decode(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\x003\ndata: c\n\nid\ndata: d\n\n")
    assert [event.id for event in events] == ["1", "1", "1", ""]


def test_retry_counts_only_when_it_is_all_ascii_digits() -> None:
    """A retry of ASCII digits sets the reconnection time; "15s" or non-ASCII digits are ignored."""
    decoder = SseDecoder()
    events = decoder.feed(b"retry: 1500\ndata: a\n\nretry: 15s\ndata: b\n\nretry: \xd9\xa1\ndata: c\n\n")
    assert [event.retry for event in events] == [1500, None, None]
    assert decoder.retry_ms == 1500


def test_unknown_fields_are_ignored() -> None:
    """Fields other than event, data, id and retry change nothing, and do not make an event pending."""
    decoder = SseDecoder()
    assert decoder.feed(b"foo: bar\ndata: x\nDATA: y\n\n") == [SseEvent("x")]
    assert decoder.feed(b"error: {}\n") == []
    assert decoder.finish() is False


def test_an_event_without_data_is_not_dispatched() -> None:
    """A blank line after only event/id/retry lines resets the event instead of dispatching it."""
    events = decode(b"event: ping\n\nid: 9\nretry: 10\n\ndata: x\n\n")
    assert events == [SseEvent("x", "message", "9", None)]


def test_multi_byte_characters_split_across_reads_decode_whole() -> None:
    """A read boundary inside a UTF-8 sequence does not corrupt the character."""
    raw = "data: é€😀\n\n".encode()
    assert datas(decode(*(raw[i : i + 1] for i in range(len(raw))))) == ["é€😀"]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    """Undecodable bytes do not raise; each becomes U+FFFD as the UTF-8 decode algorithm says."""
    assert datas(decode(b"data: a\xffb\xc3\n\n")) == ["a\ufffdb\ufffd"]


def test_an_incomplete_trailing_event_is_reported_and_not_dispatched() -> None:
    """A data line with no blank line after it is discarded at the end, and finish() says so."""
    decoder = SseDecoder()
    assert decoder.feed(b"data: done\n\ndata: cut\n") == [SseEvent("done")]
    assert decoder.pending is True
    assert decoder.finish() is True


def test_an_unterminated_last_line_counts_as_mid_event() -> None:
    """Bytes of a line that never ended (even a would-be blank line's field) are a pending event."""
    decoder = SseDecoder()
    decoder.feed(b"data: x\n\ndata: y")
    assert decoder.finish() is True


def test_a_stream_ending_after_a_complete_event_ended_cleanly() -> None:
    """finish() is False when nothing was pending, and resets the decoder's buffers."""
    decoder = SseDecoder()
    decoder.feed(b"data: x\n\n")
    assert decoder.pending is False
    assert decoder.finish() is False
    assert decoder.finish() is False


def test_an_overlong_unfinished_line_raises_a_clear_error() -> None:
    """A line that grows past the limit without ending raises, whether it comes at once or in pieces."""
    with pytest.raises(SseLineTooLong, match=r"SSE line exceeds 16 bytes \(17 buffered"):
        SseDecoder(max_pending=16).feed(b"data: " + b"x" * 11)
    decoder = SseDecoder(max_pending=16)
    decoder.feed(b"data: ")
    decoder.feed(b"x" * 10)  # 16 bytes: still allowed
    with pytest.raises(SseLineTooLong):
        decoder.feed(b"x")


def test_an_overlong_tail_after_complete_lines_raises() -> None:
    """The unfinished line after the last line end of a read counts against the limit as well."""
    with pytest.raises(SseLineTooLong):
        SseDecoder(max_pending=16).feed(b"data: a\n\ndata: " + b"x" * 20)


def test_complete_lines_longer_than_the_limit_pass_when_they_hold_no_data() -> None:
    """The line limit bounds buffered bytes: a long comment that arrives with its end is never buffered."""
    assert datas(SseDecoder(max_pending=16).feed(b":" + b"x" * 100 + b"\ndata: x\n\n")) == ["x"]


def test_an_event_whose_data_grows_past_the_limit_raises() -> None:
    """Many short data lines without a blank line cannot grow the buffered event without bound."""
    decoder = SseDecoder(max_pending=16)
    assert datas(decoder.feed(b"data: 1234567\ndata: 1234567\n\n")) == ["1234567\n1234567"]  # 16 bytes
    with pytest.raises(SseLineTooLong, match="SSE event data exceeds 16 bytes"):
        decoder.feed(b"data: 12345\n" * 3)


def test_the_limit_must_be_positive() -> None:
    """A decoder that could buffer nothing is a configuration mistake."""
    with pytest.raises(ValueError, match="max_pending"):
        SseDecoder(max_pending=0)


# --- the plain path: whole events of one data line ------------------------------------------------

PIECES = (
    b"data: {\"a\": 1}\n\n", b"data: [DONE]\n\n", b"data: caf\xc3\xa9\n\n", b"data: bad \xff\n\n", b"data:x\n\n",
    b"data:  two spaces\n\n", b"event: error\n", b"id: 9\n", b"retry: 5\n", b": ping\n\n", b"data: a\r\n\r\n",
    b"data: a\n", b"data: b\n\n", b"\n", b"\r", b"da", b"ta: split\n\n", b"\xef\xbb\xbf", b"data: \n\n",
)  # fmt: skip


@given(st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map(b"".join), max_size=12))
def test_the_plain_path_gives_what_feed_gives_and_refuses_everything_else(reads: list[bytes]) -> None:
    """Wherever `plain_data` answers, its values are the data of exactly the events `feed` returns for that
    read (typed message, under the same id), and it leaves the decoder as `feed` does."""
    plain, reference = SseDecoder(), SseDecoder()
    answered = 0
    for read in reads:
        expected = reference.feed(read)
        values = plain.plain_data(read)
        if values is None:
            assert plain.feed(read) == expected
            continue
        answered += 1
        assert [SseEvent(v.decode("utf-8", "replace"), "message", plain.last_event_id) for v in values] == expected
        assert (plain.pending, plain.last_event_id, plain.retry_ms) == (
            reference.pending, reference.last_event_id, reference.retry_ms)  # fmt: skip
    assert plain.finish() == reference.finish()


def test_the_plain_path_takes_token_events_and_nothing_partial() -> None:
    decoder = SseDecoder()
    assert decoder.plain_data(b'data: {"a": 1}\n\n') is None  # the first read may still start with a BOM
    decoder.feed(b": hello\n\n")
    assert decoder.plain_data(b'data: {"a": 1}\n\ndata: [DONE]\n\n') == [b'{"a": 1}', b"[DONE]"]
    assert decoder.plain_data(b"data: a\ndata: b\n\n") is None  # two data lines make one event
    assert decoder.plain_data(b"data: a\r\n\r\n") is None
    assert decoder.plain_data(b"data: a\n\ndata: b") is None  # an unfinished event
    decoder.feed(b"event: error\n")
    assert decoder.plain_data(b"data: a\n\n") is None  # the event's type was already set
    small = SseDecoder(max_pending=4)
    small.feed(b"\n")
    assert small.plain_data(b"data: 123\n\n") == [b"123"]
    assert small.plain_data(b"data: 1234\n\n") is None  # feed raises for it: past the limit with its newline
