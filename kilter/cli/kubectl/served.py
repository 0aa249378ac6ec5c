"""kilter's side of ``--kilter-service``: ``POST /debug/views`` answers a plugin view from the running state.

The body is ``remote.request_of``'s: the view's command line, the namespace
the plugin resolved (null: every namespace) and, for ``plan``, the
manifest's text. The command line is parsed by the plugin's own parser and
the view is the plugin's own function, run on kilter's live store (the one
its extender and webhooks answer from, so nothing is listed again) with its
decision log for ``explain``. The answer is ``{"exit", "output", "error"}``:
what the plugin prints and exits with. Bad input (malformed JSON, unknown
fields, a bad command line, a snapshot or catalog option, a job that does
not parse) is a 400 with one line; a state not loaded yet is a 503.

It runs on the event loop, between extender calls: the views read the
store's published state and fleet, which only the loop changes. A view on
150,000 pods takes tens of milliseconds (``make bench``: ``plugin``), which
/debug's trusted callers are few enough to afford; the expected starts
``pending`` and ``explain`` show cost about a second there, so they are
worked out at most once per ``RECENT_MAX_AGE_S`` for every view.
"""

from __future__ import annotations

import json
import time
from typing import Any, NoReturn

import msgspec

from kilter.cli import sources
from kilter.cli.kubectl import main
from kilter.cli.kubectl.decisions import Recorded
from kilter.cli.kubectl.output import Answer
from kilter.cli.kubectl.remote import local_only
from kilter.cli.kubectl.source import Cluster
from kilter.cli.parsing import StrictParser
from kilter.cli.plan import job_object_of
from kilter.gangs.expected_starts import RECENT_MAX_AGE_S
from kilter.gangs.store_starts import StartsOfStore
from kilter.kube.api import check_namespace
from kilter.model.errors import InputError, KilterError
from kilter.state.store import ClusterStore

__all__ = ["MAX_REQUEST_BYTES", "MAX_WORDS", "ServedViews", "ViewRequest"]

MAX_REQUEST_BYTES = 2 << 20  # a job manifest and a command line
MAX_WORDS = 64
MAX_WORD = 4096


class ViewRequest(msgspec.Struct, forbid_unknown_fields=True):
    argv: list[str]
    namespace: str | None = None
    job: str | None = None


class _RaisingParser(StrictParser):
    """The plugin's parser, whose errors (and help, which a server cannot print) raise ``InputError``."""

    def error(self, message: str) -> NoReturn:
        raise InputError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise InputError(message.strip() if message else "help and --version are printed by the plugin, not served")

    def _print_message(self, message: str, file: Any = None) -> None:
        return None


class ServedViews:
    """Answers ``/debug/views`` from ``store`` and the decision log's ``recorded`` lookup."""

    def __init__(self, store: ClusterStore, recorded: Recorded | None, starts: StartsOfStore | None = None) -> None:
        self.store = store
        self.recorded = recorded
        self._parser = main.build_parser(_RaisingParser)
        # The server's own answer (the gang book's), which it keeps fresh off its event loop.
        self.starts = starts or StartsOfStore(store, time.time, max_age_s=RECENT_MAX_AGE_S)

    def answer(self, body: bytes) -> tuple[int, bytes]:
        """(HTTP status, body): 200 and the view's answer, 400 and one line, or 503 before the state is loaded."""
        if not self.store.ready:
            return 503, b"state not loaded yet\n"
        try:
            said = self._run(self._request(body))
        except KilterError as exc:
            return 400, f"{exc}\n".encode()
        return 200, json.dumps({"exit": said.code, "output": said.text, "error": said.error}).encode()

    def _request(self, body: bytes) -> ViewRequest:
        if len(body) > MAX_REQUEST_BYTES:
            raise InputError(f"the request is {len(body)} bytes; the limit is {MAX_REQUEST_BYTES}")
        try:
            request = msgspec.json.decode(body, type=ViewRequest)
        except msgspec.DecodeError as exc:
            raise InputError(f"the request is not a view request: {exc}") from None
        if not request.argv or len(request.argv) > MAX_WORDS or any(len(w) > MAX_WORD for w in request.argv):
            raise InputError(f"argv must hold 1 to {MAX_WORDS} words of at most {MAX_WORD} characters")
        return request

    def _run(self, request: ViewRequest) -> Answer:
        args = self._parser.parse_args(request.argv)
        if getattr(args, "view", None) is None:  # ``completion``: a script the plugin prints itself
            raise InputError(f"{args.command!r} is not a view kilter answers; the plugin runs it itself")
        flag = local_only(args)
        if flag is not None:
            raise InputError(f"{flag} shapes the plugin's own reading; kilter answers from its own state")
        if args.command == "plan":
            if request.job is None:
                raise InputError("plan needs the manifest's text in job")
            args.job = job_object_of(request.job, source="the job manifest")
            args.filename = None
        elif request.job is not None:
            raise InputError(f"job is for plan, not {args.command}")
        namespace = None if request.namespace is None else check_namespace(request.namespace)
        now_s = sources.now_of(args)
        cluster = Cluster(self.store, now_s, namespace, recorded=self.recorded, starts=self.starts)
        answer: Answer = args.view(args, cluster)
        return answer
