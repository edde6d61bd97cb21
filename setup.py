"""Build of the optional native parts: the record stamper (`protocol._stamp`, see
protocol/stamping.py) and the passthrough relay engine (`proxy._relay`, see
proxy/native_relay.py), which also stamps Produce requests (proxy/relay_stamp.c) and scans
Fetch responses (proxy/relay_fetch.c).

Both share the record walk, varints, id cutting and CRC32C of protocol/stamp_core.c,
compiled into each. Everything else about the package is in pyproject.toml.
`optional=True`: where no C compiler is found the install still succeeds and Herald uses the
pure-Python reference instead.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("protocol._stamp", ["protocol/_stamp.c", "protocol/stamp_core.c"], optional=True,
              include_dirs=["protocol"], depends=["protocol/stamp_core.h"],
              extra_compile_args=["-O2"]),
    Extension("proxy._relay", ["proxy/_relay.c", "proxy/relay_stamp.c", "proxy/relay_fetch.c",
                                    "proxy/relay_trace.c", "protocol/stamp_core.c"],
              optional=True, include_dirs=["protocol", "proxy"],
              depends=["protocol/stamp_core.h", "proxy/relay_stamp.h", "proxy/relay_fetch.h",
                       "proxy/relay_trace.h"],
              extra_compile_args=["-O2"], libraries=["pthread"]),
])
