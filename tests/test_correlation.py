"""The ambient correlation id and the middleware that sets it per request."""

from __future__ import annotations

import asyncio
import logging
import textwrap
import threading
from collections.abc import Iterator

import pytest
from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.test import (
    AsyncClient,
    AsyncRequestFactory,
    Client,
    RequestFactory,
    override_settings,
)
from django.urls import path

from bsft_saga.correlation import (
    HEADER,
    CorrelationIdFilter,
    CorrelationMiddleware,
    correlation_scope,
    get_correlation_id,
    is_valid_correlation_id,
    new_correlation_id,
)
from tests.support.examples import docs_examples, run_python

# --- the context variable -------------------------------------------------------------


def test_no_correlation_id_outside_any_scope() -> None:
    assert get_correlation_id() is None


def test_scope_sets_the_id_for_the_block_and_restores_on_exit() -> None:
    with correlation_scope("req-1") as value:
        assert value == "req-1"
        assert get_correlation_id() == "req-1"
    assert get_correlation_id() is None


def test_nested_scopes_restore_the_outer_id() -> None:
    with correlation_scope("outer"):
        with correlation_scope("inner"):
            assert get_correlation_id() == "inner"
        assert get_correlation_id() == "outer"
        with correlation_scope(None):
            assert get_correlation_id() is None
        assert get_correlation_id() == "outer"


def test_scope_restores_the_previous_id_when_the_block_raises() -> None:
    with correlation_scope("outer"):
        with pytest.raises(RuntimeError), correlation_scope("inner"):
            raise RuntimeError("boom")
        assert get_correlation_id() == "outer"


def test_a_new_thread_does_not_see_the_callers_id() -> None:
    seen: list[str | None] = []
    with correlation_scope("main"):
        thread = threading.Thread(target=lambda: seen.append(get_correlation_id()))
        thread.start()
        thread.join()
    assert seen == [None]


def test_a_scope_in_another_thread_does_not_leak_into_this_one() -> None:
    inside = threading.Event()
    release = threading.Event()

    def worker() -> None:
        with correlation_scope("worker"):
            inside.set()
            release.wait(timeout=5)

    with correlation_scope("main"):
        thread = threading.Thread(target=worker)
        thread.start()
        assert inside.wait(timeout=5)
        try:
            assert get_correlation_id() == "main"
        finally:
            release.set()
            thread.join()
        assert get_correlation_id() == "main"


def test_concurrent_asyncio_tasks_keep_their_own_ids() -> None:
    async def task(correlation_id: str, gate: asyncio.Event) -> str | None:
        with correlation_scope(correlation_id):
            await gate.wait()  # both scopes are open at the same time here
            return get_correlation_id()

    async def main() -> list[str | None]:
        gate = asyncio.Event()
        tasks = [asyncio.create_task(task(cid, gate)) for cid in ("a", "b")]
        await asyncio.sleep(0)
        gate.set()
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(main()) == ["a", "b"]


def test_sync_to_async_carries_the_id_into_the_worker_thread() -> None:
    async def main() -> str | None:
        with correlation_scope("carried"):
            return await sync_to_async(get_correlation_id)()

    assert asyncio.run(main()) == "carried"


# --- validation -----------------------------------------------------------------------


def test_new_ids_are_32_hex_characters_and_valid() -> None:
    first, second = new_correlation_id(), new_correlation_id()
    assert len(first) == 32
    assert int(first, 16) >= 0
    assert first != second
    assert is_valid_correlation_id(first)


def test_an_id_of_200_characters_is_accepted() -> None:
    assert is_valid_correlation_id("a" * 200)


def test_an_id_of_201_characters_is_rejected() -> None:
    assert not is_valid_correlation_id("a" * 201)


def test_the_empty_id_is_rejected() -> None:
    assert not is_valid_correlation_id("")


def test_letters_digits_and_dash_underscore_dot_colon_are_accepted() -> None:
    assert is_valid_correlation_id("Order-42_retry.3:eu-west")


@pytest.mark.parametrize(
    "value",
    [
        "has space",
        "semi;colon",
        "slash/",
        "new\nline",
        "trailing-newline\n",
        "tab\t",
        "quote'",
        "<script>",
        "crlf\r\nSet-Cookie:x",
        "unicode-é",
        "arabic-\u0663",  # ARABIC-INDIC DIGIT THREE: a digit, but not ASCII
        "fullwidth-\uff21",  # FULLWIDTH LATIN CAPITAL LETTER A
    ],
)
def test_other_characters_are_rejected(value: str) -> None:
    assert not is_valid_correlation_id(value)


# --- the middleware -------------------------------------------------------------------


class _RecordingView:
    """Stands in for the rest of the stack: records the ambient id while it runs."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def __call__(self, request: HttpRequest) -> HttpResponse:
        self.seen.append(get_correlation_id())
        return HttpResponse("ok")


def _request(header: str | None = None) -> HttpRequest:
    headers = {HEADER: header} if header is not None else {}
    return RequestFactory().get("/", headers=headers)


def test_a_valid_incoming_id_is_used_and_echoed() -> None:
    view = _RecordingView()
    request = _request("client-req:0001")

    response = CorrelationMiddleware(view)(request)

    assert view.seen == ["client-req:0001"]
    assert request.correlation_id == "client-req:0001"  # type: ignore[attr-defined]
    assert response[HEADER] == "client-req:0001"  # type: ignore[index]
    assert get_correlation_id() is None  # the scope ended with the request


def test_an_invalid_incoming_id_is_replaced_by_a_fresh_one_which_is_echoed() -> None:
    view = _RecordingView()

    response = CorrelationMiddleware(view)(_request("x" * 201))

    fresh = response[HEADER]  # type: ignore[index]
    assert fresh != "x" * 201
    assert is_valid_correlation_id(fresh)
    assert len(fresh) == 32
    assert view.seen == [fresh]


def test_an_id_with_forbidden_characters_is_replaced() -> None:
    view = _RecordingView()

    response = CorrelationMiddleware(view)(_request("bad id;drop"))

    assert response[HEADER] != "bad id;drop"  # type: ignore[index]
    assert is_valid_correlation_id(response[HEADER])  # type: ignore[index]
    assert view.seen == [response[HEADER]]  # type: ignore[index]


def test_a_missing_header_gets_a_fresh_id() -> None:
    view = _RecordingView()
    request = _request()

    response = CorrelationMiddleware(view)(request)

    fresh = response[HEADER]  # type: ignore[index]
    assert is_valid_correlation_id(fresh)
    assert view.seen == [fresh]
    assert request.correlation_id == fresh  # type: ignore[attr-defined]


def test_each_request_without_a_header_gets_its_own_id() -> None:
    middleware = CorrelationMiddleware(_RecordingView())

    first = middleware(_request())[HEADER]  # type: ignore[index]
    second = middleware(_request())[HEADER]  # type: ignore[index]

    assert first != second


def test_the_middleware_is_sync_when_the_chain_is_sync() -> None:
    assert not iscoroutinefunction(CorrelationMiddleware(_RecordingView()))


def test_the_middleware_is_async_when_the_chain_is_async() -> None:
    async def get_response(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    assert iscoroutinefunction(CorrelationMiddleware(get_response))


async def _call_async(middleware: CorrelationMiddleware, request: HttpRequest) -> HttpResponseBase:
    """Call ``middleware`` as Django's ASGI handler does: the call returns a coroutine."""
    response = middleware(request)
    assert asyncio.iscoroutine(response)
    return await response


def test_the_async_path_runs_the_chain_in_scope_and_echoes_the_id() -> None:
    seen: list[str | None] = []

    async def get_response(request: HttpRequest) -> HttpResponse:
        seen.append(get_correlation_id())
        return HttpResponse("ok")

    middleware = CorrelationMiddleware(get_response)
    request = AsyncRequestFactory().get("/", headers={HEADER: "async-1"})

    response = asyncio.run(_call_async(middleware, request))

    assert seen == ["async-1"]
    assert response[HEADER] == "async-1"


def test_the_async_path_replaces_an_invalid_id() -> None:
    seen: list[str | None] = []

    async def get_response(request: HttpRequest) -> HttpResponse:
        seen.append(await sync_to_async(get_correlation_id)())  # as a sync view would
        return HttpResponse("ok")

    middleware = CorrelationMiddleware(get_response)
    request = AsyncRequestFactory().get("/", headers={HEADER: "no spaces allowed"})

    response = asyncio.run(_call_async(middleware, request))

    assert is_valid_correlation_id(response[HEADER])
    assert seen == [response[HEADER]]


# --- through Django's handlers -------------------------------------------------------


def _sync_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(get_correlation_id() or "")


async def _async_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(get_correlation_id() or "")


urlpatterns = [path("sync/", _sync_view), path("async/", _async_view)]


@pytest.fixture
def correlation_urls() -> Iterator[None]:
    with override_settings(
        ROOT_URLCONF=__name__, MIDDLEWARE=["bsft_saga.correlation.CorrelationMiddleware"]
    ):
        yield


@pytest.mark.usefixtures("correlation_urls")
def test_the_wsgi_handler_runs_the_view_with_the_echoed_id() -> None:
    response = Client().get("/sync/", headers={HEADER: "wsgi-1"})

    assert response.content == b"wsgi-1"
    assert response[HEADER] == "wsgi-1"


@pytest.mark.usefixtures("correlation_urls")
def test_the_header_is_set_on_error_responses_too() -> None:
    response = Client().get("/missing/", headers={HEADER: "wsgi-404"})

    assert response.status_code == 404
    assert response[HEADER] == "wsgi-404"


@pytest.mark.usefixtures("correlation_urls")
@pytest.mark.parametrize("url", ["/async/", "/sync/"])
def test_the_asgi_handler_runs_the_view_with_the_id(url: str) -> None:
    async def get() -> tuple[str, bytes]:
        response = await AsyncClient().get(url, headers={HEADER: "asgi 1"})  # invalid: space
        return response[HEADER], response.content

    fresh, content = asyncio.run(get())

    assert is_valid_correlation_id(fresh)
    assert content == fresh.encode()


# --- logging --------------------------------------------------------------------------


def test_the_log_filter_adds_the_ambient_id() -> None:
    record = logging.LogRecord("bsft_saga", logging.INFO, __file__, 1, "msg", None, None)
    log_filter = CorrelationIdFilter()

    with correlation_scope("log-1"):
        assert log_filter.filter(record)
    assert record.__dict__["correlation_id"] == "log-1"

    assert log_filter.filter(record)
    assert record.__dict__["correlation_id"] == "-"


def test_the_logging_example_in_the_docs_prints_the_ambient_id() -> None:
    example = docs_examples("observability.md", "bsft_saga.correlation.CorrelationIdFilter")
    # A fresh interpreter, so that reconfiguring logging cannot disturb this one.
    script = example + textwrap.dedent(
        """
        import logging.config
        from bsft_saga.correlation import correlation_scope

        logging.config.dictConfig(LOGGING)
        with correlation_scope("docs-1"):
            logging.getLogger("docs").info("step ran")
        logging.getLogger("docs").info("outside")
        """
    )
    result = run_python(script)

    assert result.returncode == 0, result.stderr
    assert "[docs-1] docs: step ran" in result.stderr
    assert "[-] docs: outside" in result.stderr
