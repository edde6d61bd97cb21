"""Build of the optional native parts: the record stamper (`protocol._stamp`, see
protocol/stamping.py) and the passthrough relay engine (`proxy.native._relay`, see
proxy/native/relay.py: the engine is proxy/native/relay_engine.c, what it reads of frames
relay_frames.c), which also stamps Produce requests (proxy/native/relay_stamp.c) and scans
Fetch responses (proxy/native/relay_fetch.c) and carries TLS sessions on with OpenSSL
(proxy/native/relay_tls.c, linked with the system libssl Python's ssl module uses). Only
_relay.c touches Python objects: the fuzz targets (fuzz/native/) build the rest without
Python.

Both share the record walk, varints, id cutting and CRC32C of protocol/stamp_core.c,
compiled into each. The relay links the system's codec libraries (relay_codec.c: zlib,
libsnappy, liblz4, libzstd; scripts/setup.sh installs their Debian -dev packages) to stamp
and scan compressed batches. Everything else about the package is in pyproject.toml.
`optional=True`: where no C compiler is found the install still succeeds and Herald uses the
pure-Python reference instead. Under `HERALD_TEST_STRICT=1` (CI, `.ci/run`) a failed build
fails the install instead, so that it cannot pass as a suite of skipped native tests.
"""

import os

from setuptools import Extension, setup

OPTIONAL = os.environ.get("HERALD_TEST_STRICT", "") != "1"
"""Whether a failed build of the extensions leaves Herald on its Python reference."""

CODEC_LIBRARIES = ["z", "snappy", "lz4", "zstd"]
"""The codec libraries relay_codec.c calls (gzip, snappy, lz4, zstd)."""

setup(ext_modules=[
    Extension("protocol._stamp", ["protocol/_stamp.c", "protocol/stamp_core.c",
                                   "protocol/link_memory.c"], optional=OPTIONAL,
              include_dirs=["protocol"],
              depends=["protocol/stamp_core.h", "protocol/link_memory.h"],
              extra_compile_args=["-O2"]),
    Extension("proxy.native._relay",
              ["proxy/native/_relay.c", "proxy/native/relay_engine.c",
               "proxy/native/relay_frames.c", "proxy/native/relay_stamp.c",
               "proxy/native/relay_fetch.c", "proxy/native/relay_trace.c",
               "proxy/native/relay_tls.c", "proxy/native/relay_codec.c",
               "protocol/stamp_core.c", "protocol/link_memory.c"],
              optional=OPTIONAL, include_dirs=["protocol", "proxy/native"],
              depends=["protocol/stamp_core.h", "protocol/link_memory.h",
                       "protocol/contracts/features.h",
                       "proxy/native/relay_engine.h", "proxy/native/relay_frames.h",
                       "proxy/native/relay_stamp.h", "proxy/native/relay_fetch.h",
                       "proxy/native/relay_trace.h", "proxy/native/relay_tls.h",
                       "proxy/native/relay_codec.h"],
              # The system OpenSSL, the one Python's own ssl module is linked with: the engine
              # carries on the TLS connections that module made (relay_tls.c).
              extra_compile_args=["-O2"],
              libraries=["pthread", "ssl", "crypto", *CODEC_LIBRARIES]),
])
