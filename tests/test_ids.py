from __future__ import annotations

import time

from memtap.ids import id_time_ms, new_id


def test_ids_increase_within_one_millisecond_and_encode_their_time() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(5000)]
    after = time.time_ns() // 1_000_000
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 26 for i in ids)
    assert before <= id_time_ms(ids[0]) <= id_time_ms(ids[-1]) <= after + 1
