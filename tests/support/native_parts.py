"""Whether the native parts are here (the parts of the machine, and what a test does when
one is missing: tests/support/required_parts.py).

The extensions are built with `optional=True` (setup.py), so a failed build leaves Herald on
its pure-Python reference and, left alone, turns every native test into a skip: the suite
would pass while testing nothing of the engine. Every test that needs a native part says so
through this module. Locally a missing part skips; with `HERALD_TEST_STRICT=1` (CI sets it:
`.ci/run`) it is an error, and `tests/conftest.py` refuses to start a strict run at all while
one is missing.
"""

from __future__ import annotations

import importlib
import ssl
from types import ModuleType

from protocol import stamping
from proxy.native import relay as native_relay
from tests.support.required_parts import STRICT, Part, absent, needs, require

__all__ = ["ALL", "ENGINE", "STAMPER", "STRICT", "TLS", "missing", "native_module", "needs",
           "require"]

def _tls_missing() -> str:
    if not native_relay.available():
        return "the native relay (proxy.native._relay) is not built, so it carries no TLS"
    from proxy.native import _relay

    engine = _relay.capabilities()
    if not engine["tls"]:
        return "the native relay is built without TLS (NE_TLS=0)"
    return (f"the native relay runs OpenSSL {engine['openssl_version']:#x}, Python's ssl module "
            f"{ssl.OPENSSL_VERSION_NUMBER:#x} ({ssl.OPENSSL_VERSION}): it cannot adopt that "
            f"module's connections")


ENGINE = Part(native_relay.available(), "the native relay (proxy.native._relay) is not built")
TLS = Part(native_relay.carries_tls(), "" if native_relay.carries_tls() else _tls_missing())
STAMPER = Part(stamping.NATIVE, "the record stamper (protocol._stamp) is not built")
ALL = (ENGINE, TLS, STAMPER)


def native_module(name: str) -> ModuleType:
    """`pytest.importorskip` for a native extension, which fails under the strict switch."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        absent(f"{name} is not built: {exc}")


def missing() -> list[str]:
    """Why each missing part is missing (empty when all are here)."""
    return [part.missing for part in ALL if not part.present]
