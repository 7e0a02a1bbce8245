"""What the daemon's ``/metrics`` server and the Label Studio bridge's server share.

Both are the standard library's threaded servers (``wsgiref``, ``http.server``), which print a
multi-line traceback on stderr when a request fails, among the log's one-line JSON events: a
scraper or a load balancer's TCP check that resets its connection (``ConnectionResetError``
while the request line is read) printed 15 lines each time. And a client that stopped half-way
through its request held its thread for good (no timeout on the socket).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

#: a request's socket waits this long at most for the client (each read or write)
REQUEST_TIMEOUT_S = 10.0


class OneLineErrors:
    """Mixin for a ``socketserver`` server: a failed request is one log event, not a traceback.

    A client that went away or stalled past ``REQUEST_TIMEOUT_S`` is its own business (DEBUG);
    anything else is the server's (WARNING, the traceback inside the event's ``exc`` field).
    """

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Called by ``socketserver`` inside the ``except`` of a failed request."""
        exc = sys.exc_info()[1]
        extra = {
            "event": "http_request_failed",
            "client": str(client_address[0]) if client_address else "",
            "error": f"{type(exc).__name__}: {exc}",
        }
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("HTTP client went away", extra=extra)
        else:
            log.warning("HTTP request failed", extra=extra, exc_info=True)
