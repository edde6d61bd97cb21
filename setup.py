"""Build of the optional native parts: the record stamper (`protocol._stamp`, see
protocol/stamping.py) and the passthrough relay engine (`proxy._relay`, see
proxy/native_relay.py).

Everything else about the package is in pyproject.toml. `optional=True`: where no C compiler
is found the install still succeeds and Herald uses the pure-Python reference instead.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("protocol._stamp", ["protocol/_stamp.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("proxy._relay", ["proxy/_relay.c"], optional=True,
              extra_compile_args=["-O2"], libraries=["pthread"]),
])
