"""The interceptors that ship with Herald, by their configuration `type` name."""

from __future__ import annotations

from interceptors.api import Interceptor
from interceptors.builtin.audit import Audit
from interceptors.builtin.drop_headers import DropHeaders
from interceptors.builtin.fetch_log import FetchLog
from interceptors.builtin.filter import Filter
from interceptors.builtin.header_from import HeaderFrom
from interceptors.builtin.header_limits import HeaderLimits
from interceptors.builtin.header_to import HeaderTo
from interceptors.builtin.insert_header import InsertHeader
from interceptors.builtin.rename_header import RenameHeader
from interceptors.builtin.require_headers import RequireHeaders
from interceptors.builtin.trace_context import TraceContext

BUILTINS: dict[str, type[Interceptor]] = {
    "trace_context": TraceContext,
    "audit": Audit,
    "insert_header": InsertHeader,
    "drop_headers": DropHeaders,
    "rename_header": RenameHeader,
    "header_from": HeaderFrom,
    "header_to": HeaderTo,
    "require_headers": RequireHeaders,
    "header_limits": HeaderLimits,
    "filter": Filter,
    "fetch_log": FetchLog,
}
