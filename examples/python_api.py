"""codecoder's Python API: a runtime for a project, a session, calls, a question answered by the
application, an awaited call cancelled.

    python examples/python_api.py PROJECT
"""

from __future__ import annotations

import asyncio
import sys

import codecoder
from codecoder import Answer, AskRequest


def ask(question: AskRequest) -> Answer:
    """The application's person: here, every `touch` for the session, nothing else."""
    print(
        f"asked: {question.key} ({question.environment.value}), choices: "
        + ", ".join(choice.value for choice in question.choices)
    )
    return Answer.SESSION if question.key == "run_command:touch" else Answer.DENY


def blocking(project: str) -> None:
    with codecoder.Runtime(project, asker=ask) as runtime, runtime.session() as session:
        for command in ("echo hello", "touch made.txt", "touch again.txt", "chmod 600 made.txt"):
            outcome = session.call("run_command", {"command": command})
            decision = outcome.decision
            print(
                f"{command!r}: ok={outcome.ok} source={decision.source.value if decision else None}"
            )
        refused = session.call("run_command", {"command": "chmod 600 made.txt"})
        try:
            refused.unwrap()
        except codecoder.DeniedByUser as error:
            print(f"refused: {error}")


async def awaited(project: str) -> None:
    runtime = codecoder.Runtime(project, asker=codecoder.fixed(Answer.ONCE))
    async with runtime, runtime.session() as session:
        outcome = await session.acall("read_file", {"path": "made.txt"})
        print(f"read made.txt: ok={outcome.ok}")
        long = asyncio.create_task(session.acall("run_command", {"command": "sleep 600"}))
        await asyncio.sleep(1)
        long.cancel()  # the sleep is killed before the cancellation comes through
        try:
            await long
        except asyncio.CancelledError:
            print("the long command was cancelled and stopped")


if __name__ == "__main__":
    blocking(sys.argv[1])
    asyncio.run(awaited(sys.argv[1]))
