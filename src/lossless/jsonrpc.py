"""JSON-RPC 2.0 framing shared by the two servers that speak it on stdio: ``lossless serve``
(its own methods) and ``lossless mcp`` (the MCP SDK's, behind a guard that answers what the
SDK would drop). One place says what a well-formed request is and how a refusal looks, so a
client waiting on an id always gets an answer naming what was wrong.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "envelope_problem",
    "error",
    "request_id",
]

# JSON-RPC 2.0's own codes (the -32000..-32099 range is left to each server).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


def error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """An error response to request *rid* (``None`` when the id could not be read)."""
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": body}


def request_id(request: Any) -> Any:
    """The id of *request* if it has a usable one (a string or an integer), else ``None``."""
    if not isinstance(request, dict):
        return None
    rid = request.get("id")
    if isinstance(rid, bool) or not isinstance(rid, str | int):
        return None
    return rid


def envelope_problem(request: Any) -> tuple[Any, int, str] | None:
    """What is wrong with the envelope of one decoded request — ``(id to answer, code,
    message)`` — or ``None`` when it is a well-formed request or notification."""
    if not isinstance(request, dict):
        return None, INVALID_REQUEST, "a request must be a JSON object"
    rid = request.get("id")
    if isinstance(rid, bool) or not (rid is None or isinstance(rid, str | int)):
        return None, INVALID_REQUEST, "id must be a string, a number or null"
    if request.get("jsonrpc") != "2.0":
        return rid, INVALID_REQUEST, 'every request needs "jsonrpc": "2.0"'
    if not isinstance(request.get("method"), str):
        return rid, INVALID_REQUEST, "method must be a string"
    params = request.get("params", {})
    if params is not None and not isinstance(params, dict):
        return rid, INVALID_PARAMS, "params must be an object of named values"
    return None
