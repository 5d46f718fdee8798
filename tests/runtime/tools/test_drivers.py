"""The model drivers: the OpenAI-compatible client against a fake server on loopback, and the
scripted driver the agent tests use."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from codecoder.foundation.errors import CodecoderError, ExecutionFailed, ExecutionTimeout
from codecoder.tools.drivers import (
    Message,
    ModelTurn,
    OpenAIChatDriver,
    ScriptedDriver,
    ScriptedRequest,
    ToolCall,
    ToolSpec,
)
from tests.runtime.tools.loopback import LoopbackServer, Reply, Request, Route

ENDPOINT = "/v1/chat/completions"
READ = ToolSpec(
    "read_file",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # urllib honours proxy variables; the fake server is on loopback and must be reached directly.
    for name in (
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)


def completion(content: str | None = None, *calls: dict[str, Any]) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return Reply.json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def driver_for(server: LoopbackServer, **kw: Any) -> OpenAIChatDriver:
    return OpenAIChatDriver(server.url("/v1"), "test-model", **kw)


def failure(reply: Reply | Route, **kw: Any) -> tuple[str, CodecoderError]:
    """The endpoint's URL and the error a driver raised for `reply`."""
    with LoopbackServer({ENDPOINT: reply}) as server:
        try:
            driver_for(server, **kw).complete([Message.user("hi")], [])
        except CodecoderError as exc:
            return server.url(ENDPOINT), exc
    raise AssertionError("the driver did not fail")


# --- the OpenAI-compatible driver ------------------------------------------------------------


def test_the_openai_driver_sends_the_conversation_and_tools_and_reads_tool_calls() -> None:
    reply = completion(None, function_call("call_1", "read_file", '{"path": "README.md"}'))
    with LoopbackServer({ENDPOINT: reply}) as server:
        turn = driver_for(server, api_key="sk-test").complete(
            [
                Message.system("be brief"),
                Message.user("what is this project?"),
                Message("assistant", "", (ToolCall("call_0", "reason", {"thought": "hm"}),)),
                Message.tool_result("call_0", "Thought recorded."),
            ],
            [READ],
        )

    assert turn == ModelTurn("", (ToolCall("call_1", "read_file", {"path": "README.md"}),))
    [request] = server.requests
    assert (request.method, request.path) == ("POST", ENDPOINT)
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.headers["Content-Type"] == "application/json"
    assert request.json() == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "what is this project?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "reason", "arguments": '{"thought": "hm"}'},
                    }
                ],
            },
            {"role": "tool", "content": "Thought recorded.", "tool_call_id": "call_0"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file",
                    "parameters": READ.parameters,
                },
            }
        ],
    }


def test_a_text_answer_has_no_tool_calls_and_no_key_sends_no_authorization() -> None:
    with LoopbackServer({ENDPOINT: completion("It is a runtime.")}) as server:
        turn = driver_for(server).complete([Message.user("what is this?")], [])

    assert turn == ModelTurn("It is a runtime.")
    [request] = server.requests
    assert "Authorization" not in request.headers
    assert "tools" not in request.json()


def test_tool_call_arguments_that_are_not_json_are_kept_with_the_problem() -> None:
    reply = completion(
        None,
        function_call("c1", "grep", "{pattern: oops"),
        function_call("c2", "reason", ""),
        {"type": "function", "function": {"name": "glob", "arguments": {"pattern": "*.py"}}},
    )
    with LoopbackServer({ENDPOINT: reply}) as server:
        turn = driver_for(server).complete([Message.user("go")], [])

    assert turn.tool_calls == (
        ToolCall(
            "c1",
            "grep",
            "{pattern: oops",
            "the arguments are not JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
        ),
        ToolCall("c2", "reason", {}),
        ToolCall("call_2", "glob", {"pattern": "*.py"}),
    )


def test_arguments_that_were_not_json_are_sent_back_as_the_model_wrote_them() -> None:
    broken = ToolCall("c1", "grep", "{pattern: oops", "not JSON")
    with LoopbackServer({ENDPOINT: completion("ok")}) as server:
        driver_for(server).complete([Message("assistant", "", (broken,))], [])

    [request] = server.requests
    sent = request.json()["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert sent == "{pattern: oops"


def test_an_http_error_names_the_server_and_its_message() -> None:
    refusal = Reply.json({"error": {"message": "Incorrect API key provided"}}, 401)
    where, error = failure(refusal, api_key="sk-wrong")

    assert type(error) is ExecutionFailed
    assert str(error) == (
        f"the model server at {where} answered HTTP 401 Unauthorized: Incorrect API key provided"
    )
    assert "sk-wrong" not in str(error)


def test_a_server_error_without_json_shows_the_start_of_its_body() -> None:
    where, error = failure(Reply(502, b"upstream exploded"))

    assert type(error) is ExecutionFailed
    assert str(error) == (
        f"the model server at {where} answered HTTP 502 Bad Gateway: upstream exploded"
    )


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (Reply.json({"id": "x"}), "choices: Field required"),
        (
            Reply.json({"choices": []}),
            "choices: List should have at least 1 item after validation, not 0",
        ),
        (
            Reply.json({"choices": [{"message": {"content": 42}}]}),
            "choices.0.message.content: Input should be a valid string",
        ),
        (
            Reply.json({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}),
            "choices.0.message.tool_calls.0.function.name: Field required",
        ),
    ],
    ids=["no choices", "empty choices", "content not text", "call without a name"],
)
def test_a_malformed_reply_is_a_clear_error(reply: Reply, problem: str) -> None:
    where, error = failure(reply)

    assert type(error) is ExecutionFailed
    assert str(error) == f"the model server at {where} sent a malformed reply: {problem}"


def test_a_reply_that_is_not_json_is_a_clear_error() -> None:
    where, error = failure(Reply.html("<html>captive portal</html>"))

    assert type(error) is ExecutionFailed
    assert str(error) == (
        f"the model server at {where} sent a reply that is not JSON: "
        "Expecting value: line 1 column 1 (char 0)"
    )


def test_a_server_that_does_not_answer_in_time_is_a_timeout() -> None:
    def stall(request: Request) -> Reply:
        time.sleep(5.0)
        return completion("too late")

    started = time.monotonic()
    where, error = failure(stall, timeout=0.2)
    elapsed = time.monotonic() - started

    assert type(error) is ExecutionTimeout
    assert str(error) == f"the model server at {where} did not answer within 0.2s"
    assert elapsed < 3  # not the server's 5 s (a loaded machine gets room)


def test_a_server_that_is_not_there_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port once the probe is closed.
    driver = OpenAIChatDriver(f"http://127.0.0.1:{port}/v1/", "m")

    with pytest.raises(ExecutionFailed) as caught:
        driver.complete([Message.user("hi")], [])

    assert str(caught.value) == (
        f"cannot reach the model server at http://127.0.0.1:{port}/v1/chat/completions: "
        "[Errno 111] Connection refused"
    )


def test_an_oversized_reply_is_refused() -> None:
    where, error = failure(completion("x" * 5000), max_reply_bytes=1000)

    assert type(error) is ExecutionFailed
    assert str(error) == f"the model server at {where} sent a reply larger than 1000 bytes"


# --- the scripted driver ---------------------------------------------------------------------


def test_the_scripted_driver_plays_its_turns_and_records_what_it_was_sent() -> None:
    def answer_from_the_tool(request: ScriptedRequest) -> ModelTurn:
        return ModelTurn.say(f"the tool said: {request.messages[-1].content}")

    driver = ScriptedDriver(
        [ModelTurn.calling(ToolCall("c1", "read_file", {"path": "a"})), answer_from_the_tool]
    )
    first = driver.complete([Message.user("read a")], [READ])
    second = driver.complete([Message.user("read a"), Message.tool_result("c1", "A!")], [READ])

    assert (first, second) == (
        ModelTurn("", (ToolCall("c1", "read_file", {"path": "a"}),)),
        ModelTurn("the tool said: A!"),
    )
    assert [r.tool_names for r in driver.requests] == [["read_file"], ["read_file"]]
    assert driver.requests[1].messages[-1] == Message("tool", "A!", tool_call_id="c1")


def test_a_scripted_driver_out_of_turns_is_an_error() -> None:
    driver = ScriptedDriver([ModelTurn.say("only one")])
    driver.complete([], [])

    with pytest.raises(
        ExecutionFailed, match=r"^the scripted model has no turn left \(it was given 1\)$"
    ):
        driver.complete([], [])
