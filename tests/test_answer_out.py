"""A forwarded call answered first lets its answer out before the work after it: that work waits
for the SDK's task serving the request (which writes the answer) to end, but never for long."""

from __future__ import annotations

import asyncio

import pytest

from memtap.proxy.forward import ANSWER_OUT_S, _answer_out

pytestmark = pytest.mark.anyio


async def test_the_work_after_an_answer_waits_until_the_request_task_has_ended() -> None:
    release = asyncio.Event()
    order: list[str] = []

    async def handler() -> None:  # the SDK's task: it writes the answer, then ends
        await release.wait()
        order.append("answer written")

    task = asyncio.get_running_loop().create_task(handler())

    async def after() -> None:
        await _answer_out(task)
        order.append("work after the answer")

    waiting = asyncio.get_running_loop().create_task(after())
    for _ in range(20):  # many turns of the loop: it still waits for the request's task
        await asyncio.sleep(0)
    assert not waiting.done() and order == []
    release.set()
    await asyncio.wait_for(waiting, timeout=10)
    assert order == ["answer written", "work after the answer"]


async def test_no_request_task_or_one_that_has_ended_is_not_waited_for() -> None:
    done = asyncio.get_running_loop().create_task(asyncio.sleep(0))
    await done
    await asyncio.wait_for(_answer_out(None), timeout=10)
    await asyncio.wait_for(_answer_out(done), timeout=10)


async def test_a_request_task_that_never_ends_holds_the_work_after_the_answer_only_briefly() -> None:
    stuck = asyncio.get_running_loop().create_task(asyncio.Event().wait())  # a caller that never reads
    try:
        await asyncio.wait_for(_answer_out(stuck), timeout=10 + ANSWER_OUT_S)
        assert not stuck.done()
    finally:
        stuck.cancel()
