"""Calling the runtime from an event loop, and askers that are coroutines.

The runtime's calls block (a command runs, a container answers, a person is asked): an
application on an event loop (asyncio, or anyio on either backend) runs each in a worker thread
(`in_worker`), so its loop goes on serving while the call runs. Cancelling the awaiting task
stops the call as `Session.call`'s `cancel` event does, and the cancellation is passed on only
once the call has ended: what the call started (a command's whole process tree, a container's
process) is gone by then, never left running behind a cancelled task.

An asker may be a coroutine function (`async def ask(request) -> Answer`; `AsyncAsker`).
`answering()` makes it an ordinary asker for the permission chain, which asks from whatever
thread runs the call: during an awaited call the coroutine runs on the caller's event loop (the
worker thread waits for it), and a cancellation of the call cancels the question, which then
counts as Deny; called with no event loop around (a plain `Session.call`), it runs in an event
loop of its own. Ordinary askers are left as they are.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import UsageError
from codecoder.permissions.prompt import Asker, AskRequest

if TYPE_CHECKING:
    from anyio import CancelScope
    from anyio.lowlevel import EventLoopToken

__all__ = ["AsyncAsker", "answering", "in_worker", "is_async_asker"]

T = TypeVar("T")

AsyncAsker = Callable[[AskRequest], Awaitable[Answer]]
"""An asker that is a coroutine function: `async def ask(request: AskRequest) -> Answer`."""


class _CallerLoop:
    """The event loop an awaited call came from, and the questions open on it for that call."""

    def __init__(self, token: EventLoopToken) -> None:
        self.token = token
        self.cancelled = False
        self._open: set[CancelScope] = set()

    async def answer(self, question: Awaitable[Answer]) -> Answer:
        """The asker's answer; Deny when the call is cancelled before or while it is asked."""
        import anyio

        if self.cancelled:
            _close(question)
            return Answer.DENY
        scope = anyio.CancelScope()
        self._open.add(scope)
        try:
            with scope:
                return await question
        finally:
            self._open.discard(scope)
        return Answer.DENY  # the call was cancelled while the question was open

    def cancel(self) -> None:
        """Cancel the open questions (on the loop's own thread)."""
        self.cancelled = True
        for scope in list(self._open):
            scope.cancel()


_CALLER: contextvars.ContextVar[_CallerLoop | None] = contextvars.ContextVar(
    "codecoder_caller_loop", default=None
)


async def in_worker(call: Callable[[threading.Event], T]) -> T:
    """`call(cancel)` run in a worker thread; a cancellation of the awaiting task sets `cancel`,
    cancels the questions the call has open, waits until `call` has returned, and then goes on.
    Context variables (an OpenTelemetry span, the caller's loop for async askers) are seen in
    the thread."""
    import anyio
    import anyio.lowlevel
    import anyio.to_thread

    cancel = threading.Event()
    returned = threading.Event()
    caller = _CallerLoop(anyio.lowlevel.current_token())

    def work() -> T:
        try:
            return call(cancel)
        finally:
            returned.set()

    context = contextvars.copy_context()
    context.run(_CALLER.set, caller)
    try:
        return await anyio.to_thread.run_sync(context.run, work, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cancel.set()
        caller.cancel()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(returned.wait)
        raise


def is_async_asker(asker: Callable[..., Any]) -> bool:
    """Whether `asker` is a coroutine function (or an object whose `__call__` is one)."""
    return inspect.iscoroutinefunction(asker) or inspect.iscoroutinefunction(
        getattr(asker, "__call__", None)  # noqa: B004 (an instance's __call__, not callable())
    )


def answering(asker: Asker | AsyncAsker) -> Asker:
    """`asker` as the permission chain calls it (see the module docstring)."""
    if not is_async_asker(asker):
        return asker  # type: ignore[return-value]
    asynchronous: AsyncAsker = asker  # type: ignore[assignment]

    def ask(request: AskRequest) -> Answer:
        question = asynchronous(request)
        caller = _CALLER.get()
        if caller is None:
            return _on_a_loop_of_its_own(question)
        import anyio.from_thread

        return anyio.from_thread.run(caller.answer, question, token=caller.token)

    ask.__qualname__ = ask.__name__ = getattr(asker, "__name__", "async_asker")
    return ask


def _on_a_loop_of_its_own(question: Awaitable[Answer]) -> Answer:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        _close(question)
        raise UsageError(
            "an async asker cannot answer a call made with session.call() on a running event "
            "loop: await session.acall(...) instead"
        )
    return asyncio.run(_awaited(question))


async def _awaited(question: Awaitable[Answer]) -> Answer:
    return await question


def _close(question: Awaitable[Answer]) -> None:
    """A question never awaited is closed, so Python does not warn that it was never run."""
    if isinstance(question, Coroutine):
        question.close()
