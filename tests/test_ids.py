from __future__ import annotations

import time

from memtap.ids import _counted, _encode, id_time_ms, new_id, new_ids


def test_ids_increase_within_one_millisecond_and_encode_their_time() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(5000)]
    after = time.time_ns() // 1_000_000
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 26 for i in ids)
    assert before <= id_time_ms(ids[0]) <= id_time_ms(ids[-1]) <= after + 1


def test_ids_made_at_once_increase_between_the_ids_made_before_and_after_them() -> None:
    before_ms = time.time_ns() // 1_000_000
    first = new_id()
    batch = new_ids(5000)
    last = new_id()
    after_ms = time.time_ns() // 1_000_000
    assert len(batch) == 5000 and len(set(batch)) == 5000 and all(len(i) == 26 for i in batch)
    assert [first, *batch, last] == sorted([first, *batch, last])
    assert first < batch[0] and batch[-1] < last
    assert before_ms <= id_time_ms(batch[0]) == id_time_ms(batch[-1]) <= after_ms + 1
    assert new_ids(0) == []


def test_ids_counted_up_are_encoded_as_each_value_alone_across_a_change_of_their_first_characters() -> None:
    start = (5 << 20) - 3  # the 12 characters above the last 20 bits change three values in
    assert _counted("H" * 10, start, 6) == ["H" * 10 + _encode(v, 16) for v in range(start, start + 6)]
