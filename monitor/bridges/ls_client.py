"""A small Label Studio REST client on ``urllib`` (standard library only).

Only the calls the bridge needs: who am I, projects, task import/list/get/delete, webhooks.
Authentication is ``Authorization: Token <token>`` (Label Studio's legacy API token, enabled
by default and with ``LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true``). The token is held in a
private attribute and never appears in a message, a ``repr`` or a log line.

Errors: ``LabelStudioUnavailable`` (connection refused, timeout, HTTP 5xx: retry later),
``LabelStudioAuthError`` (401/403: the token is wrong; retrying does not help),
``LabelStudioNotFound`` (404) and ``LabelStudioError`` (anything else, with the response's
first 300 characters).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from monitor.errors import MonitorError

JsonObj = dict[str, Any]
_PAGE = 100
IMPORT_TIMEOUT_S = 120.0


class LabelStudioError(MonitorError):
    """Label Studio answered with an error, or with something that is not the expected JSON."""


class LabelStudioUnavailable(LabelStudioError):
    """Label Studio cannot be reached or fails with 5xx; retrying later makes sense."""


class LabelStudioAuthError(LabelStudioError):
    """The API token was refused (HTTP 401/403)."""


class LabelStudioNotFound(LabelStudioError):
    """The object does not exist (HTTP 404), e.g. a task deleted in the UI."""


class LabelStudioClient:
    """Blocking JSON calls to one Label Studio server."""

    def __init__(self, url: str, token: str, timeout_s: float = 15.0) -> None:
        self.url = url.rstrip("/")
        self.__token = token
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"LabelStudioClient({self.url!r}, token=<redacted>)"

    # -- transport --------------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, str | int] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """One request; returns the decoded JSON (None for an empty body)."""
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Token {self.__token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        where = f"{method} {self.url}{path}"
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            text = exc.read()[:300].decode("utf-8", "replace")
            if exc.code in (401, 403):
                msg = (
                    f"{where}: HTTP {exc.code}: Label Studio refused the API token; check the "
                    "token in the environment variable named by labelstudio.token_env"
                )
                raise LabelStudioAuthError(msg) from None
            if exc.code == 404:
                msg = f"{where}: HTTP 404 {text}"
                raise LabelStudioNotFound(msg) from None
            cls = LabelStudioUnavailable if exc.code >= 500 else LabelStudioError
            msg = f"{where}: HTTP {exc.code} {text}"
            raise cls(msg) from None
        # HTTPException: the server went away mid-response (IncompleteRead), which stopped the
        # bridge's loop for good when Label Studio was stopped under a task listing; URLError
        # and TimeoutError are OSErrors
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            msg = f"{where}: Label Studio is unreachable: {reason}"
            raise LabelStudioUnavailable(msg) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # nested too deep: RecursionError
            msg = f"{where}: not JSON: {raw[:200]!r}"
            raise LabelStudioError(msg) from None

    # -- calls ------------------------------------------------------------------------------

    def whoami(self) -> JsonObj:
        """The token's user (checks the URL and the token in one call)."""
        return _obj(self.call("GET", "/api/current-user/whoami"))

    def user(self, user_id: int) -> JsonObj:
        """One user (id, email, names)."""
        return _obj(self.call("GET", f"/api/users/{user_id}"))

    def projects(self) -> Iterator[JsonObj]:
        """Every project visible to the user (paginated)."""
        page = 1
        while True:
            out = self.call("GET", "/api/projects", query={"page": page, "page_size": _PAGE})
            if isinstance(out, list):  # older servers: no pagination
                yield from out
                return
            body = _obj(out)
            yield from body.get("results", [])
            if not body.get("next"):
                return
            page += 1

    def create_project(self, fields: Mapping[str, Any]) -> JsonObj:
        """POST /api/projects (title, label_config, expert_instruction, ...)."""
        return _obj(self.call("POST", "/api/projects", dict(fields)))

    def update_project(self, project_id: int, fields: Mapping[str, Any]) -> JsonObj:
        """PATCH /api/projects/{id} (e.g. ``maximum_annotations``)."""
        return _obj(self.call("PATCH", f"/api/projects/{project_id}", dict(fields)))

    def import_tasks(self, project_id: int, tasks: Sequence[Mapping[str, Any]]) -> list[int]:
        """Import ``[{"data": ..., "meta": ...}]``; returns the new task ids in order."""
        path = f"/api/projects/{project_id}/import"
        query = {"return_task_ids": "true"}
        # an import Label Studio commits after the client gave up is imported again on retry
        # (the bridge's polls remove the second tasks): give a large import the time it takes
        out = _obj(self.call("POST", path, list(tasks), query=query, timeout_s=IMPORT_TIMEOUT_S))
        ids = out.get("task_ids")
        if not isinstance(ids, list) or len(ids) != len(tasks):
            msg = f"import into project {project_id}: unexpected answer {str(out)[:200]}"
            raise LabelStudioError(msg)
        return [int(i) for i in ids]

    def tasks(self, project_id: int, fields: str = "all") -> Iterator[JsonObj]:
        """Every task of the project (paginated).

        ``fields="all"``: with annotations; ``"task_only"``: without them, but with meta,
        ``updated_at`` (changed by every new, edited or deleted annotation) and the counts
        ``total_annotations`` and ``cancelled_annotations``. Pages are read until the answer's
        ``total`` is reached or a page is empty: a server may cap the page size below the one
        asked for (``TASK_API_PAGE_SIZE_MAX``), so a short page is not the last.
        """
        page, seen = 1, 0
        while True:
            query: dict[str, str | int] = {
                "project": project_id,
                "page": page,
                "page_size": _PAGE,
                "fields": fields,
            }
            try:
                body = _obj(self.call("GET", "/api/tasks", query=query))
            except LabelStudioNotFound:  # past the last page
                return
            tasks = body.get("tasks", [])
            yield from tasks
            seen += len(tasks)
            total = body.get("total")
            if not tasks or (isinstance(total, int) and seen >= total):
                return
            page += 1

    def task(self, task_id: int) -> JsonObj:
        """One task with its annotations and meta."""
        return _obj(self.call("GET", f"/api/tasks/{task_id}"))

    def delete_task(self, task_id: int) -> None:
        """DELETE /api/tasks/{id} (a task already gone is fine)."""
        try:
            self.call("DELETE", f"/api/tasks/{task_id}")
        except LabelStudioNotFound:
            return

    def delete_tasks(self, project_id: int, task_ids: Sequence[int]) -> None:
        """Delete several tasks of a project in one call (the Data Manager's bulk action)."""
        self.call(
            "POST",
            "/api/dm/actions",
            {"selectedItems": {"all": False, "included": list(task_ids)}},
            query={"id": "delete_tasks", "project": project_id},
        )

    def webhooks(self, project_id: int) -> list[JsonObj]:
        """The project's webhooks."""
        out = self.call("GET", "/api/webhooks", query={"project": project_id})
        return [w for w in out if isinstance(w, dict)] if isinstance(out, list) else []

    def create_webhook(self, fields: Mapping[str, Any]) -> JsonObj:
        """POST /api/webhooks."""
        return _obj(self.call("POST", "/api/webhooks", dict(fields)))


def _obj(value: Any) -> JsonObj:
    if not isinstance(value, dict):
        msg = f"expected a JSON object from Label Studio, got {str(value)[:200]}"
        raise LabelStudioError(msg)
    return value
